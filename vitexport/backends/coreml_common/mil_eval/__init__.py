"""A NumPy executor for saved Core ML ML programs, so Core ML numerics can be checked off macOS.

coremltools reads a package's program and weight blobs on any OS, but only macOS can run it. This
package walks the program's entry function op by op and computes each op with NumPy, following the
MIL op definitions. Where the program computes in fp16, every op's result is rounded to fp16, as an
fp16 engine stores it (the arithmetic itself runs in fp32: NumPy's fp16 matmul is very slow).
Compressed weights (constexpr_* ops) are decompressed once, at load time.
An op this executor does not know is an error that names it, never a skip.

    program = load_program("model.mlpackage")
    outputs = program.run({program.input_names[0]: pixels})

Modules: `program` (loading, planning, running), `ops` (the op tables, by family), `fp16` (rounding).
"""

from vitexport.backends.coreml_common.mil_eval.errors import UnsupportedOpError
from vitexport.backends.coreml_common.mil_eval.fp16 import round_fp16 as _round_fp16  # noqa: F401  (the tests check the rounding on its own)
from vitexport.backends.coreml_common.mil_eval.ops import OPS
from vitexport.backends.coreml_common.mil_eval.program import MilProgram, load_program

__all__ = ["OPS", "MilProgram", "UnsupportedOpError", "load_program"]
