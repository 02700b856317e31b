"""What every backend that starts from an ONNX graph shares (ONNX Runtime's, TensorRT's, OpenVINO's):
the exporters' names, fp16 conversion, int8 QDQ quantisation and what calibrated it, the graph's
lint, and where a divergence starts (per encoder block). Not a backend: nothing here is registered.

May import: core, models, verify, the backend spec. Never a backend plug-in (they import this)."""
