"""TensorRT support: the API adapter, build options, the engine builder and the Jetson bundle."""
