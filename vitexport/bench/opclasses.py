"""Which class of work an operator is, by the name its runtime's profiler gives its type: matrix
products, attention, normalisation, activations, precision conversion (quantise, dequantise, casts),
layout (copies, reorders, reshapes) and other. One table per runtime, since each names its operators
its own way; a type no table knows goes to "other", never dropped, so the classes always add up to
what the profiler measured.

Pure standard library: the parent process classifies what a bench worker's profiler returned.
"""

from __future__ import annotations

# The classes in the order every table and page shows them, with their labels.
CLASSES: dict[str, str] = {
    "matmul": "matrix products",
    "attention": "attention",
    "norm": "normalisation",
    "activation": "activations",
    "quantize": "quantise/dequantise/cast",
    "layout": "layout copies and reorders",
    "other": "other",
}

_ONNXRUNTIME = {
    "matmul": ("MatMul", "Gemm", "FusedMatMul", "FusedGemm", "MatMulInteger", "MatMulIntegerToFloat",
               "DynamicQuantizeMatMul", "QLinearMatMul", "QGemm", "MatMulNBits", "MatMulBnb4", "MatMulFpQ4",
               "Conv", "FusedConv", "ConvInteger", "QLinearConv", "NhwcConv", "NhwcFusedConv", "Einsum"),
    "attention": ("Attention", "MultiHeadAttention", "QAttention", "GroupQueryAttention", "PackedAttention",
                  "Softmax", "QLinearSoftmax", "LogSoftmax"),
    "norm": ("LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
             "SkipSimplifiedLayerNormalization", "EmbedLayerNormalization", "BatchNormalization",
             "InstanceNormalization", "GroupNorm", "RMSNormalization"),
    "activation": ("Gelu", "FastGelu", "BiasGelu", "QuickGelu", "Erf", "Relu", "Sigmoid", "Tanh", "HardSigmoid",
                   "LeakyRelu", "QLinearLeakyRelu", "QLinearSigmoid", "Softplus", "Elu", "Selu", "Mish",
                   "HardSwish", "BiasSoftmax"),
    "quantize": ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "Cast", "QLinearAdd",
                 "QLinearMul"),
    "layout": ("Transpose", "Reshape", "Concat", "Slice", "Gather", "GatherElements", "Split", "Squeeze",
               "Unsqueeze", "Flatten", "Expand", "Identity", "Tile", "Pad", "QLinearConcat", "ReorderInput",
               "ReorderOutput", "Shape", "ConstantOfShape", "MemcpyToHost", "MemcpyFromHost"),
}

# OpenVINO: the node types of the compiled (execution) graph, as the CPU and GPU plugins name them.
_OPENVINO = {
    "matmul": ("FullyConnected", "FullyConnectedQuantizedLegacy", "MatMul", "Convolution", "GroupConvolution", "Deconvolution", "Gemm",
               "BinaryConvolution", "FullyConnectedCompressed"),
    "attention": ("ScaledDotProductAttention", "MHA", "Softmax", "SoftMax", "PagedAttentionExtension", "SDPA"),
    "norm": ("MVN", "NormalizeL2", "RMS", "RMSNorm", "LayerNorm", "BatchNormInference"),
    "activation": ("Gelu", "Relu", "Sigmoid", "Tanh", "Swish", "HSwish", "HSigmoid", "Mish", "Elu", "SoftPlus",
                   "Clamp", "Erf", "Exp"),
    "quantize": ("FakeQuantize", "Convert", "Quantize", "Dequantize", "FakeConvert"),
    "layout": ("Reorder", "Transpose", "Reshape", "Concat", "Concatenation", "Split", "VariadicSplit", "Gather",
               "StridedSlice", "Slice", "Broadcast", "Squeeze", "Unsqueeze", "Tile", "Pad", "ShapeOf",
               "Permute", "Crop", "DepthToSpace", "SpaceToDepth"),
}

# PyTorch's profiler (eager and TorchScript): aten operators by their key (self time, so a composite
# such as aten::linear counts only what it does itself).
_TORCH = {
    "matmul": ("aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
               "aten::conv2d", "aten::convolution", "aten::_convolution", "aten::mkldnn_convolution",
               "aten::_mkldnn_convolution", "aten::einsum", "aten::_addmm_activation", "quantized::linear",
               "quantized::linear_dynamic", "quantized::conv2d", "mkldnn::_linear_pointwise",
               "aten::_int_mm", "aten::_weight_int8pack_mm"),
    "attention": ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention_for_cpu",
                  "aten::_scaled_dot_product_attention_math", "aten::_scaled_dot_product_flash_attention",
                  "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention",
                  "aten::_native_multi_head_attention", "aten::_transformer_encoder_layer_fwd",
                  "aten::softmax", "aten::_softmax", "aten::log_softmax", "aten::_log_softmax"),
    "norm": ("aten::layer_norm", "aten::native_layer_norm", "aten::batch_norm", "aten::_batch_norm_impl_index",
             "aten::native_batch_norm", "aten::group_norm", "aten::native_group_norm", "aten::rms_norm",
             "aten::_fused_rms_norm"),
    "activation": ("aten::gelu", "aten::relu", "aten::relu_", "aten::silu", "aten::sigmoid", "aten::tanh",
                   "aten::hardswish", "aten::elu", "aten::leaky_relu", "aten::erf", "aten::mish", "aten::threshold"),
    "quantize": ("aten::quantize_per_tensor", "aten::quantize_per_channel", "aten::dequantize", "aten::to",
                 "aten::_to_copy", "aten::type_as", "aten::_autocast_to_reduced_precision",
                 "quantized_decomposed::quantize_per_tensor", "quantized_decomposed::dequantize_per_tensor",
                 "quantized_decomposed::choose_qparams"),
    "layout": ("aten::transpose", "aten::permute", "aten::reshape", "aten::view", "aten::_reshape_alias",
               "aten::_unsafe_view", "aten::contiguous", "aten::clone", "aten::copy_", "aten::cat",
               "aten::flatten", "aten::expand", "aten::slice", "aten::select", "aten::unsqueeze", "aten::squeeze",
               "aten::t", "aten::chunk", "aten::split", "aten::unbind", "aten::as_strided", "aten::narrow",
               "aten::repeat", "aten::index", "aten::unflatten", "aten::detach", "aten::empty", "aten::empty_like",
               "aten::empty_strided", "aten::zeros", "aten::resize_", "aten::pad", "aten::constant_pad_nd",
               "aten::stack", "aten::index_select", "aten::numpy_T"),
}

# ExecuTorch's ETDump: portable kernels by operator name (their event "native_call_addmm.out" without
# its prefix), XNNPACK's operators by the name it gives them ("Fully Connected (NC, QD8, F32, QC8W)"):
# matched on their first words, see PREFIXES.
_EXECUTORCH = {
    "matmul": ("addmm.out", "mm.out", "bmm.out", "convolution.out", "linear.out",
               "Fully Connected", "Convolution", "Batch Matrix Multiply", "Dynamic Fully Connected"),
    "attention": ("_softmax.out", "softmax.out", "Softmax", "Scaled Dot Product Attention"),
    "norm": ("native_layer_norm.out", "layer_norm.out", "Layer Norm"),
    "activation": ("gelu.out", "relu.out", "sigmoid.out", "tanh.out", "GELU", "Clamp",
                   "Sigmoid", "Tanh", "ELU", "Leaky ReLU", "Hardswish"),
    "quantize": ("quantized_decomposed.quantize_per_tensor.out", "quantized_decomposed.dequantize_per_tensor.out",
                 "quantized_decomposed.choose_qparams.tensor_out", "Convert", "_to_copy.out"),
    "layout": ("permute_copy.out", "view_copy.out", "cat.out", "slice_copy.Tensor_out",
               "select_copy.int_out", "expand_copy.out", "clone.out", "unsqueeze_copy.out",
               "squeeze_copy.dims_out", "transpose_copy.int_out", "split_with_sizes_copy.out",
               "Transpose", "Copy", "Concatenate", "Slice", "Static Reshape", "Static Transpose", "Even Split"),
}

# TensorRT: the layer types of its engine inspector (fused layers keep the type of what they compute).
_TENSORRT = {
    "matmul": ("MatrixMultiply", "Convolution", "Deconvolution", "FullyConnected", "gemm", "CaskConvolution",
               "CaskGemmConvolution", "CaskFlattenConvolution", "CaskDeconvolution"),
    "attention": ("SoftMax", "Softmax", "Attention", "MHA", "myelinMha", "FusedMHA"),
    "norm": ("Normalization", "LayerNorm", "Scale"),
    "activation": ("Activation",),
    "quantize": ("Quantize", "Dequantize", "Cast", "QuantizeLinear", "DequantizeLinear"),
    "layout": ("Reformat", "Shuffle", "Concatenation", "Slice", "Gather", "Padding", "NoOp", "Copy"),
}

TABLES: dict[str, dict[str, tuple[str, ...]]] = {
    "onnxruntime": _ONNXRUNTIME, "openvino": _OPENVINO, "torch": _TORCH, "executorch": _EXECUTORCH,
    "tensorrt": _TENSORRT,
}

# Runtimes whose operator names carry details after their kind (XNNPACK's data types, OpenVINO's
# FullyConnected variants): matched on a prefix.
PREFIXES = {"executorch", "openvino"}

# Fused operators whose type says nothing of what they compute (OpenVINO's Subgraph, TensorRT's Myelin
# regions): their node name, which keeps the source layer's path, says which class. Checked in order.
FUSED = {"Subgraph", "Myelin", "ForeignNode", "PointWise", "PointWiseV2", "DELEGATE_CALL"}
NAME_HINTS: tuple[tuple[str, str], ...] = (
    ("scaled_dot_product", "attention"), ("attention", "attention"), ("softmax", "attention"), ("mha", "attention"),
    ("layer_norm", "norm"), ("layernorm", "norm"), ("norm", "norm"), ("gelu", "activation"), ("relu", "activation"),
    ("fakequantize", "quantize"), ("quantize", "quantize"), ("linear", "matmul"), ("matmul", "matmul"),
)


def _index(runtime: str) -> dict[str, str]:
    return {name: cls for cls, names in TABLES.get(runtime, {}).items() for name in names}


def classify(runtime: str, op_type: str, name: str = "") -> str:
    """The class of an operator of type `op_type` (named `name`) as `runtime`'s profiler reports it;
    "other" for what the table does not know."""
    index = _index(runtime)
    if op_type in index:
        return index[op_type]
    if runtime in PREFIXES:
        for known in sorted(index, key=len, reverse=True):
            if op_type.startswith(known):
                return index[known]
    if op_type in FUSED or op_type.startswith("Myelin"):
        lowered = name.lower()
        for hint, cls in NAME_HINTS:
            if hint in lowered:
                return cls
    return "other"
