"""The `transformers` architectures `hf:DIR` exports, and what each one needs.

One entry per class name that `config.json` lists first under `architectures`. Adding one is an
entry here and a tiny config in the tests' table (tests/hf_tiny.py), which every hf test iterates.
"""

from __future__ import annotations

from dataclasses import dataclass

# Why sdpa for every architecture: eager attention builds its additive mask with
# `torch.where(mask, 0, min)`, an op coremltools cannot convert, and sdpa exports to ONNX (both
# exporters), TorchScript and Core ML once the freezes below are applied.
ATTENTION = "sdpa"


@dataclass(frozen=True)
class Architecture:
    outputs: tuple[str, ...]  # ModelOutput fields exported, in this order; a field the model leaves None is dropped
    processor: str  # image processor class used at the config's image size when the folder has none
    freezes: tuple[str, ...] = ()  # export-time freezes by name (vitexport.models.hf.freezes.FREEZES)
    loads_as: str | None = None  # the transformers class that loads it, when not the architecture itself
    unused: tuple[str, ...] = ()  # checkpoint key prefixes that `loads_as` leaves out on purpose
    top_level: tuple[str, ...] = ()  # config keys `loads_as` must take from the top-level config
    # attn_implementation, per sub-config where one part has no sdpa (Depth Anything's head, DETR's CNN backbone)
    attention: str | dict[str, str] = ATTENTION
    task: str = ""  # what it does (vitexport.verify.tasks.TASKS); by default a head's logits classify, features embed
    class_scores: str = "softmax"  # a detector's class logits: softmax, "no object" last (DETR), or sigmoid (RT-DETR)

    def __post_init__(self):
        if not self.task:
            object.__setattr__(self, "task", "classification" if "logits" in self.outputs else "embedding")


CLASSIFIER = ("logits",)
HEADLESS = ("last_hidden_state", "pooler_output")
EMBEDDING = ("image_embeds", "last_hidden_state")
POSITIONS = ("dinov2-position-embeddings",)  # interpolated bicubically every forward: no Core ML op for that
DETECTIONS = ("logits", "pred_boxes")  # class logits (the last class: no object) and (cx, cy, w, h) boxes in [0, 1]

ARCHITECTURES: dict[str, Architecture] = {
    "ViTForImageClassification": Architecture(CLASSIFIER, "ViTImageProcessor"),
    "ViTModel": Architecture(HEADLESS, "ViTImageProcessor"),
    "ViTMSNForImageClassification": Architecture(CLASSIFIER, "ViTImageProcessor"),
    "DeiTForImageClassification": Architecture(CLASSIFIER, "DeiTImageProcessor"),
    # logits is the mean of the class-token and distillation-token heads; all three are exported
    "DeiTForImageClassificationWithTeacher": Architecture(("logits", "cls_logits", "distillation_logits"),
                                                          "DeiTImageProcessor"),
    # BEiT rebuilds its relative-position bias every forward with in-place index writes and a
    # same-size bilinear resize: the dynamo ONNX exporter and Core ML both fail on it
    "BeitForImageClassification": Architecture(CLASSIFIER, "BeitImageProcessor",
                                               freezes=("beit-relative-position-bias",)),
    "Dinov2Model": Architecture(HEADLESS, "BitImageProcessor", freezes=POSITIONS),
    "Dinov2ForImageClassification": Architecture(CLASSIFIER, "BitImageProcessor", freezes=POSITIONS),
    "CLIPVisionModel": Architecture(HEADLESS, "CLIPImageProcessor"),
    "CLIPVisionModelWithProjection": Architecture(EMBEDDING, "CLIPImageProcessor"),
    # The published CLIP and SigLIP checkpoints hold both towers: the vision tower is what exports. Its
    # vision config carries a default projection_dim; the checkpoint's projection has the top-level one.
    "CLIPModel": Architecture(EMBEDDING, "CLIPImageProcessor", loads_as="CLIPVisionModelWithProjection",
                              unused=("text_model.", "text_projection.", "logit_scale"), top_level=("projection_dim",)),
    "SiglipVisionModel": Architecture(HEADLESS, "SiglipImageProcessor"),
    "SiglipModel": Architecture(HEADLESS, "SiglipImageProcessor", loads_as="SiglipVisionModel",
                                unused=("text_model.", "logit_scale", "logit_bias")),
    # Task heads: depth maps (N, H, W), class logits per pixel (N, K, H/4, W/4 for SegFormer), detections.
    "DPTForDepthEstimation": Architecture(("predicted_depth",), "DPTImageProcessor", task="depth"),
    "DepthAnythingForDepthEstimation": Architecture(("predicted_depth",), "DPTImageProcessor", freezes=POSITIONS,
                                                    attention={"": "eager", "backbone_config": ATTENTION},
                                                    task="depth"),
    "SegformerForSemanticSegmentation": Architecture(CLASSIFIER, "SegformerImageProcessor", task="segmentation"),
    # UperNet: a pyramid-pooling head over a backbone's stages (Swin, ConvNeXt), its logits at the input size
    "UperNetForSemanticSegmentation": Architecture(CLASSIFIER, "SegformerImageProcessor", task="segmentation",
                                                   attention={"": "eager", "backbone_config": ATTENTION}),
    "YolosForObjectDetection": Architecture(DETECTIONS, "YolosImageProcessor", freezes=("yolos-position-embeddings",),
                                            task="detection"),
    # RT-DETR: a CNN backbone, a hybrid encoder, a deformable-attention decoder over the top-scoring
    # encoder positions; its class logits read each class on its own (sigmoid, no "no object" class)
    "RTDetrForObjectDetection": Architecture(DETECTIONS, "RTDetrImageProcessor", task="detection",
                                             class_scores="sigmoid",
                                             attention={"": ATTENTION, "backbone_config": "eager"}),
    # SAM's image encoder: a ViT with windowed and global attention and a convolutional neck; its
    # image embeddings (N, C, H/16, W/16) feed SAM's prompt decoder. Published folders hold the whole SAM.
    "SamVisionModel": Architecture(("last_hidden_state",), "SamImageProcessor", task="embedding"),
    "SamModel": Architecture(("last_hidden_state",), "SamImageProcessor", task="embedding", loads_as="SamVisionModel",
                             unused=("shared_image_embedding.", "prompt_encoder.", "mask_decoder.")),
    # Mask2Former: a backbone (Swin), a deformable-attention pixel decoder, mask queries; semantic
    # segmentation is its queries' class probabilities times their masks (vitexport.core.taskmeasures)
    "Mask2FormerForUniversalSegmentation": Architecture(("class_queries_logits", "masks_queries_logits"),
                                                        "Mask2FormerImageProcessor", task="segmentation",
                                                        attention={"": "eager", "backbone_config": ATTENTION}),
    # MobileViT (v1, v2) with a DeepLabV3 head: convolutions and transformer blocks, logits at 1/32 of the
    # input; their processor hands the model BGR, rescaled and not normalised
    "MobileViTForSemanticSegmentation": Architecture(CLASSIFIER, "MobileViTImageProcessor", task="segmentation",
                                                     attention="eager"),
    "MobileViTV2ForSemanticSegmentation": Architecture(CLASSIFIER, "MobileViTImageProcessor", task="segmentation",
                                                       attention="eager", freezes=("mobilevitv2-patches",)),
    # ViTMatte: a ViTDet backbone with window attention on the image and its trimap (4 channels), alpha (N, 1, H, W)
    "VitMatteForImageMatting": Architecture(("alphas",), "VitMatteImageProcessor", task="matting",
                                            attention={"": "eager", "backbone_config": "eager"}),
    # DETR: a CNN backbone (timm's or transformers' ResNet), a transformer encoder-decoder over its features
    "DetrForObjectDetection": Architecture(DETECTIONS, "DetrImageProcessor", task="detection",
                                           attention={"": ATTENTION, "backbone_config": "eager"}),
}
