"""TensorRT support, one job per module.

api: one face for TensorRT 8.6/10/11 and TensorRT-RTX. options: build options and their rules.
fp16 / quantize: the typed ONNX a strongly typed builder needs. build: the engine and its facts.
runner: running an engine on a GPU. layers: the engine inspector's report. bundle: the Jetson folder.
ort_providers: ONNX Runtime providers, requested and actually run.
"""
