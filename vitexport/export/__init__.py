"""Building and publishing artifacts: the pipeline that resolves the model, has a backend write the
artifact into a staging folder, checks it against PyTorch and publishes it (pipeline), the staging
and publishing rules that leave nothing half-written (staging), and the sidecar JSON that carries
each artifact's story (sidecar).

May import: core, models, verify, and the backend spec (the registry and base.py), through which it
reaches every backend by name."""
