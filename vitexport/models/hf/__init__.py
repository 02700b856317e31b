"""Hugging Face `transformers` vision models from a local `save_pretrained` directory (`hf:DIR`).

`architectures` is the table of what is supported and what each architecture needs; `files` reads
the directory; `model` loads, wraps and freezes the model; `processor` turns the directory's image
processor into vitexport's preprocessing; `pixels` applies it to an image. Only `pixels` runs without
transformers (a sidecar's preprocessing is applied where transformers may be missing).
"""
