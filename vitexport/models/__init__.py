"""Where models come from: the presets (presets), the reference Vision Transformer written to export
cleanly (vit), the model specs a user gives (sources: a preset, `torchvision:`, `timm:`, `hf:DIR`, a
file or module with a factory, a reference program), their weights (weights), what is recorded of a
model (records), its outputs as named tensors (outputs), a model held in memory made ready to export
(memory), its reference program that needs no source code (reference), the process's settings while
tracing or exporting (tracing), and Hugging Face folders (hf/).

May import: core. Never verify, export or anything later in the flow."""
