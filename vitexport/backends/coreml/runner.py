"""Running a Core ML package: Core ML itself on macOS, vitexport's ML-program evaluator elsewhere."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import TYPE_CHECKING

from vitexport.backends.base import Runner
from vitexport.backends.coreml_common.library import unsupported
from vitexport.core.errors import RuntimeFailure

if TYPE_CHECKING:
    import numpy as np


class CoreMLRunner(Runner):
    """Feeds arrive normalised, as for every backend; an image-input package gets them mapped back
    to 0-255 pixels first."""

    def __init__(self, path: Path, record, compute_units: str = "ALL"):
        import numpy as np

        self.path, self.compute_units = path, compute_units
        self.input_name, self.output_names = record.input_names[0], record.output_names
        pre = record.source.preprocessing
        self.mean = np.asarray(pre["mean"], np.float64).reshape(1, -1, 1, 1)
        self.std = np.asarray(pre["std"], np.float64).reshape(1, -1, 1, 1)
        self.image_input = record.info.get("image_input", False)
        self._predict = None

    def open(self) -> None:
        if platform.system() == "Darwin":
            from vitexport.backends.coreml_common.library import import_coremltools

            ct = import_coremltools()
            model = ct.models.MLModel(str(self.path), compute_units=getattr(ct.ComputeUnit, self.compute_units))
            self.provider = f"coreml-{self.compute_units.lower()}"
            self._predict = lambda inputs: {k: v for k, v in model.predict(inputs).items()}
            return
        from vitexport.backends.coreml_common.mil_eval import UnsupportedOpError, load_program

        try:
            program = load_program(self.path)
        except UnsupportedOpError as e:
            raise unsupported(e) from None
        except (OSError, ValueError, RuntimeError) as e:
            raise RuntimeFailure(f"cannot read ML program {self.path}: {e}") from None
        self.provider = "mil-evaluator"
        self._predict = program.run

    def close(self) -> None:
        self._predict = None

    def run(self, feed: dict[str, "np.ndarray"]) -> dict[str, "np.ndarray"]:
        import numpy as np

        from vitexport.backends.coreml_common.mil_eval import UnsupportedOpError

        x = feed[self.input_name].astype(np.float64)
        if self.image_input:
            x = (x * self.std + self.mean) * 255.0  # normalised -> RGB 0-255, exactly inverting the check feed
        try:
            out = self._predict({self.input_name: x.astype(np.float32)})
        except UnsupportedOpError as e:
            raise unsupported(e) from None
        return {name: np.asarray(out[name], dtype=np.float32) for name in self.output_names}


