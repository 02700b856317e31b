"""Tiny Hugging Face models built here (never fetched): one per architecture vitexport supports.

Hidden size 32, one layer (two where the model mixes kinds of layer), 2 heads, 32x32 inputs in 8x8 patches,
5 classes, weights from a fixed seed,
written with `save_pretrained` beside the image processor a published checkpoint of that family ships
(scaled down). A new entry in vitexport.models.hf.architectures needs one here, or its tests fail.
"""

from __future__ import annotations

from pathlib import Path

IMAGE, PATCH, LABELS = 32, 8, 5
# One layer: each layer of these encoders is the same ops, and ExecuTorch's lowering time grows with them.
LAYERS = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2)
VIT = dict(LAYERS, intermediate_size=64, image_size=IMAGE, patch_size=PATCH)
TEXT = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
            max_position_embeddings=16)


def _vit(T):
    return T.ViTImageProcessor(size={"height": IMAGE, "width": IMAGE})


def _deit(T):  # like facebook/deit-*: resize 256, crop 224, bicubic
    return T.DeiTImageProcessor(size={"height": IMAGE + 4, "width": IMAGE + 4},
                                crop_size={"height": IMAGE, "width": IMAGE})


def _bit(T):  # like facebook/dinov2-*: shorter side 256, crop 224, ImageNet mean/std
    return T.BitImageProcessor(size={"shortest_edge": IMAGE + 4}, crop_size={"height": IMAGE, "width": IMAGE},
                               image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225])


def _clip(T):
    return T.CLIPImageProcessor(size={"shortest_edge": IMAGE}, crop_size={"height": IMAGE, "width": IMAGE})


def _siglip(T):
    return T.SiglipImageProcessor(size={"height": IMAGE, "width": IMAGE})


# BEiT as microsoft/beit-base-patch16-224: relative-position bias per layer (two, so each is seen frozen), no
# absolute positions.
BEIT = dict(VIT, num_hidden_layers=2, use_relative_position_bias=True, use_absolute_position_embeddings=False,
            use_mean_pooling=True, layer_scale_init_value=0.1)
# DINOv2's checkpoints are trained at 518 and run at 224, so the position embeddings are resized on every
# forward; a 7x7 grid run at 4x4 does the same here.
DINOV2 = dict(LAYERS, mlp_ratio=2, image_size=56, patch_size=PATCH)

# Task heads. DPT on a 4x4 patch grid with its neck at two scales; Depth Anything on the DINOv2 above;
# SegFormer with two stages (its logits at a quarter of the input); YOLOS with 5 detection tokens.
DPT = dict(VIT, num_hidden_layers=2, backbone_out_indices=[0, 1], neck_hidden_sizes=[16, 32],
           reassemble_factors=[2, 1], fusion_hidden_size=16, head_in_index=-1)
DEPTH_ANYTHING = dict(neck_hidden_sizes=[16, 32], reassemble_hidden_size=32, fusion_hidden_size=16, head_hidden_size=8,
                      patch_size=PATCH)
SEGFORMER = dict(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32], patch_sizes=[7, 3],
                 strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2], decoder_hidden_size=32,
                 image_size=IMAGE)
YOLOS = dict(VIT, image_size=[IMAGE, IMAGE], num_detection_tokens=5)
# DETR on transformers' own ResNet (two tiny stages, no download), one encoder and one decoder layer, 5 queries.
DETR = dict(use_timm_backbone=False, use_pretrained_backbone=False, d_model=32, encoder_layers=1, decoder_layers=1,
            encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, num_queries=5)


def _detr(T):
    backbone = T.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], out_features=["stage2"])
    return T.DetrConfig(**DETR, backbone_config=backbone, num_labels=LABELS - 1)


def _upernet(T):  # like openmmlab/upernet-swin-*: a two-stage Swin, the pyramid pooling head over both stages
    # (16 channels, not 8: OpenVINO's CPU plugin crashes on an 8-channel Swin when oneDNN is held to AVX2)
    backbone = T.SwinConfig(image_size=IMAGE, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[1, 2],
                            window_size=4, out_features=["stage1", "stage2"])
    return T.UperNetConfig(backbone_config=backbone, hidden_size=16, pool_scales=[1, 2], num_labels=LABELS,
                           use_auxiliary_head=False)


# MobileViT downsamples 32x: 64x64 gives 2x2 logits. Its default initialisation (std 0.02, BatchNorm
# scales included) shrinks activations 50x a stage, to outputs of exactly 0 here; std 0.35 keeps them
# of order one and dependent on the input.
MOBILEVIT = dict(image_size=64, patch_size=2, num_attention_heads=2, aspp_out_channels=16, num_labels=LABELS,
                 initializer_range=0.35)


def _mobilevit(T):  # like apple/deeplabv3-mobilevit-small: shorter side, crop, rescale, BGR
    return T.MobileViTImageProcessor(size={"shortest_edge": 72}, crop_size={"height": 64, "width": 64})


# SAM's ViT: windowed attention in its first layer, global in its second, 16 output channels; its
# default initialisation (std 1e-10) makes outputs of 1e-22: std 0.02 here.
SAM = dict(LAYERS, num_hidden_layers=2, image_size=IMAGE, patch_size=PATCH, output_channels=16, window_size=2,
           global_attn_indexes=[1], mlp_dim=64, initializer_range=0.02)


def _sam(T):  # like facebook/sam-vit-base: the longer side to 1024, pad to 1024x1024
    return T.SamImageProcessor(size={"longest_edge": IMAGE}, pad_size={"height": IMAGE, "width": IMAGE})


def _mask2former(T):  # like facebook/mask2former-swin-tiny-ade-semantic: a four-stage Swin, 32-channel decoder
    backbone = T.SwinConfig(image_size=64, patch_size=4, embed_dim=16, depths=[1, 1, 1, 1], num_heads=[1, 1, 2, 2],
                            window_size=2, out_features=["stage1", "stage2", "stage3", "stage4"])
    return T.Mask2FormerConfig(backbone_config=backbone, feature_size=32, mask_feature_size=32, hidden_dim=32,
                               encoder_feedforward_dim=32, dim_feedforward=32, encoder_layers=1, decoder_layers=1,
                               num_attention_heads=2, num_queries=5, num_labels=LABELS - 1, common_stride=4,
                               use_pretrained_backbone=False)


def _rt_detr(T):  # like PekingU/rtdetr_r18vd: a ResNet of basic blocks, feature levels fused and sampled
    # (a random detector's class biases start at a prior of 0.01 and its boxes barely move with the input:
    # a prior of 0.5 and std 0.3 give confident, input-dependent detections)
    # Three stages and two levels, not four and three: the encoder's fusion and the decoder's sampling across
    # levels are the same ops, in a smaller graph for ExecuTorch to lower.
    backbone = T.RTDetrResNetConfig(embedding_size=8, hidden_sizes=[8, 16, 16], depths=[1, 1, 1],
                                    layer_type="basic", out_features=["stage2", "stage3"])
    return T.RTDetrConfig(backbone_config=backbone, d_model=16, encoder_hidden_dim=16, encoder_in_channels=[16, 16],
                          decoder_in_channels=[16, 16], feat_strides=[8, 16], num_feature_levels=2,
                          encode_proj_layers=[1], encoder_ffn_dim=32,
                          decoder_ffn_dim=32, decoder_layers=1, num_queries=5, num_labels=LABELS - 1,
                          encoder_attention_heads=2, decoder_attention_heads=2, decoder_n_points=2, num_denoising=0,
                          anchor_image_size=None, use_pretrained_backbone=False, initializer_bias_prior_prob=0.5,
                          initializer_range=0.3)


def _vitmatte(T):  # like hustvl/vitmatte-small-*: ViTDet with window and global attention, relative positions
    backbone = T.VitDetConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2, image_size=IMAGE,
                              patch_size=16, num_channels=4, out_features=["stage2"], use_relative_position_embeddings=True,
                              window_block_indices=[0], window_size=2, pretrain_image_size=48)
    return T.VitMatteConfig(backbone_config=backbone, hidden_size=32, convstream_hidden_sizes=[8, 16, 16],
                            fusion_hidden_sizes=[16, 16, 16, 8])


def _dpt(T):  # like Intel/dpt-large: a fixed resize, bicubic, mean/std 0.5
    return T.DPTImageProcessor(size={"height": IMAGE, "width": IMAGE}, keep_aspect_ratio=False, ensure_multiple_of=1)


def _depth_anything(T):
    backbone = T.Dinov2Config(**dict(DINOV2, num_hidden_layers=2), out_indices=[1, 2], reshape_hidden_states=False)
    return T.DepthAnythingConfig(backbone_config=backbone, **DEPTH_ANYTHING)


# architecture -> (config, image processor or None), given the transformers module
TINY = {
    "ViTForImageClassification": lambda T: (T.ViTConfig(**VIT, num_labels=LABELS), _vit(T)),
    "ViTModel": lambda T: (T.ViTConfig(**VIT), _vit(T)),
    "ViTMSNForImageClassification": lambda T: (T.ViTMSNConfig(**VIT, num_labels=LABELS), _vit(T)),
    "DeiTForImageClassification": lambda T: (T.DeiTConfig(**VIT, num_labels=LABELS), _deit(T)),
    "DeiTForImageClassificationWithTeacher": lambda T: (T.DeiTConfig(**VIT, num_labels=LABELS), _deit(T)),
    "BeitForImageClassification": lambda T: (T.BeitConfig(**BEIT, num_labels=LABELS),
                                             T.BeitImageProcessor(size={"height": IMAGE, "width": IMAGE})),
    "Dinov2Model": lambda T: (T.Dinov2Config(**DINOV2), _bit(T)),
    "Dinov2ForImageClassification": lambda T: (T.Dinov2Config(**DINOV2, num_labels=LABELS), _bit(T)),
    "CLIPVisionModel": lambda T: (T.CLIPVisionConfig(**VIT), _clip(T)),
    "CLIPVisionModelWithProjection": lambda T: (T.CLIPVisionConfig(**VIT, projection_dim=16), _clip(T)),
    "CLIPModel": lambda T: (T.CLIPConfig(text_config=TEXT, vision_config=VIT, projection_dim=16), _clip(T)),
    "SiglipVisionModel": lambda T: (T.SiglipVisionConfig(**VIT), _siglip(T)),
    "SiglipModel": lambda T: (T.SiglipConfig(text_config=TEXT, vision_config=VIT), _siglip(T)),
    "DPTForDepthEstimation": lambda T: (T.DPTConfig(**DPT), _dpt(T)),
    "DepthAnythingForDepthEstimation": lambda T: (_depth_anything(T), _dpt(T)),
    "SegformerForSemanticSegmentation": lambda T: (T.SegformerConfig(**SEGFORMER, num_labels=LABELS),
                                                   T.SegformerImageProcessor(size={"height": IMAGE, "width": IMAGE})),
    "UperNetForSemanticSegmentation": lambda T: (_upernet(T), T.SegformerImageProcessor(
        size={"height": IMAGE, "width": IMAGE})),
    # YOLOS's and DETR's processors as users save them: do_pad stays on (at one size it pads nothing)
    "YolosForObjectDetection": lambda T: (T.YolosConfig(**YOLOS, num_labels=LABELS - 1),
                                          T.YolosImageProcessor(size={"height": IMAGE, "width": IMAGE})),
    # channels in multiples of 16: with 8 or 24, OpenVINO's CPU plugin crashes when oneDNN is held to AVX2
    "MobileViTForSemanticSegmentation": lambda T: (T.MobileViTConfig(**MOBILEVIT, hidden_sizes=[16, 32, 48],
                                                                     neck_hidden_sizes=[16, 16, 16, 32, 32, 48, 64]),
                                                   _mobilevit(T)),
    "MobileViTV2ForSemanticSegmentation": lambda T: (T.MobileViTV2Config(**MOBILEVIT, width_multiplier=0.25,
                                                                         n_attn_blocks=[1, 1, 1]),
                                                     _mobilevit(T)),
    "SamVisionModel": lambda T: (T.SamVisionConfig(**SAM), _sam(T)),
    "SamModel": lambda T: (T.SamConfig(vision_config=SAM), _sam(T)),
    "Mask2FormerForUniversalSegmentation": lambda T: (_mask2former(T), T.Mask2FormerImageProcessor(
        size={"height": 64, "width": 64})),
    "RTDetrForObjectDetection": lambda T: (_rt_detr(T), T.RTDetrImageProcessor(size={"height": 64, "width": 64})),
    "VitMatteForImageMatting": lambda T: (_vitmatte(T), T.VitMatteImageProcessor()),
    "DetrForObjectDetection": lambda T: (_detr(T), T.DetrImageProcessor(size={"height": IMAGE, "width": IMAGE})),
}


CHANNELS = {"VitMatteForImageMatting": 4}  # the image and its trimap; every other one takes RGB
SIZES = {"MobileViTForSemanticSegmentation": 64, "MobileViTV2ForSemanticSegmentation": 64,  # else IMAGE
         "Mask2FormerForUniversalSegmentation": 64, "RTDetrForObjectDetection": 64}


def save_tiny(architecture: str, folder: Path, seed: int = 0, processor: bool = True, config=None) -> Path:
    """Build the architecture's tiny model from a fixed seed and save_pretrained it (and its processor)."""
    import torch
    import transformers as T

    tiny_config, tiny_processor = TINY[architecture](T)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = getattr(T, architecture)(config or tiny_config)
    model.save_pretrained(folder)
    if processor:
        tiny_processor.save_pretrained(folder)
    return Path(folder)
