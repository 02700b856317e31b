"""What the Core ML backend and ExecuTorch's Core ML delegate share: importing coremltools quietly,
and the MIL evaluator (mil_eval) that runs a Core ML program in numpy where Core ML itself cannot
(off macOS). Not a backend: nothing here is registered.

May import: core, models, verify, the backend spec. Never a backend plug-in (they import this)."""
