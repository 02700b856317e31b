"""Reduced precisions of a float `.tflite`, made by ai-edge-quantizer (LiteRT's post-training tool):
fp16 weights (widened to fp32 at load on a CPU), int8 dynamic range (int8 weights, activations
quantised per run by the kernel), static int8 (the matrix products' activations calibrated on images,
the rest float) and full integer (every op and the model's input and output in int8)."""

from __future__ import annotations

from vitexport.backends.litert.libs import import_quantizer
from vitexport.backends.litert.options import LiteRTOptions

# The recipes' words for what each precision holds, as the sidecar records them.
SCHEMES = {"fp16": "fp16 weights (FULLY_CONNECTED, CONV_2D), float32 compute",
           "dynamic": "int8 per-channel weights, activations quantised at run time",
           "static": "int8 per-channel weights, int8 activations into FULLY_CONNECTED, CONV_2D and BATCH_MATMUL "
                     "(calibrated); the rest float32",
           "full": "full integer: int8 per-channel weights, int8 activations everywhere, int8 input and output "
                   "(calibrated)"}
# What static int8 quantises: the ops that hold a ViT's arithmetic. LayerNorm's parts, Softmax and GELU
# stay float: in int8 they cost a random-weight ViT-Ti's logits a cosine of 0.94 to PyTorch.
STATIC_OPS = ("FULLY_CONNECTED", "CONV_2D", "BATCH_MATMUL")


def quantized(data: bytes, loaded, options: LiteRTOptions, info: dict) -> tuple[bytes, dict]:
    """The quantised flatbuffer and what the sidecar says of it."""
    aeq = import_quantizer()
    from ai_edge_quantizer import qtyping, recipe

    quantizer = aeq.Quantizer(bytearray(data))
    facts: dict = {"quantizer": "ai-edge-quantizer"}
    calibration = None
    if options.precision == "fp16":
        quantizer.add_weight_only_config(regex=".*", operation_name=qtyping.TFLOperationName.ALL_SUPPORTED,
                                         num_bits=16, algorithm_key=aeq.quantizer.AlgorithmName.FLOAT_CASTING)
        facts["scheme"] = SCHEMES["fp16"]
    elif options.quant == "dynamic":
        quantizer.load_quantization_recipe(recipe.dynamic_wi8_afp32())
        facts["scheme"] = SCHEMES["dynamic"]
    else:
        if options.quant == "full":
            quantizer.load_quantization_recipe(recipe.static_wi8_ai8())
        for op in STATIC_OPS if options.quant == "static" else ():
            quantizer.add_static_config(regex=".*", operation_name=qtyping.TFLOperationName[op],
                                        activation_num_bits=8, weight_num_bits=8)
        calibration, count = _calibration(loaded, options, info["signature"])
        facts |= {"scheme": SCHEMES[options.quant], "calibration_images": count}
    calibrated = quantizer.calibrate(calibration) if calibration is not None else None
    result = quantizer.quantize(calibrated, enable_progress_report=False, enable_progress_bar=False)
    if calibration is not None:
        from vitexport.backends.onnx_common.quantize import calibration_set

        facts["calibration"] = calibration_set(options.calibration_images)
    return bytes(result.quantized_model), facts


def _calibration(loaded, options: LiteRTOptions, signature: dict) -> tuple[dict, int]:
    """{signature: [one feed per image]}: the images preprocessed as the model's checks see them, one
    at a time (the batch the artifact takes whether or not it is dynamic)."""
    from vitexport.core import progress
    from vitexport.verify.feeds import load_images

    images = load_images(options.calibration_images, loaded.preprocessing, loaded.input_shape)[0]
    batch = loaded.input_shape[0]
    name = signature["inputs"][0]
    reporter = progress.current()
    reporter.note(f"calibrating int8 on {len(images)} images")
    feeds = [{name: images[i:i + batch]} for i in range(0, len(images) - batch + 1, batch)]
    return {signature["key"]: feeds}, len(images)
