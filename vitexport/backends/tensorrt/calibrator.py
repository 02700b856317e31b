"""INT8 entropy calibrator for TensorRT generations that still have calibrators (8.6, 10.x).

Device memory comes from torch's CUDA allocator, so no pycuda is needed. The cache file lets a
second build skip calibration (TensorRT asks read_calibration_cache first).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def make_calibrator(trt, images: np.ndarray, cache: Path):
    import torch

    from vitexport.core.progress import current

    progress = current()

    class Calibrator(trt.IInt8EntropyCalibrator2):
        def __init__(self):
            super().__init__()
            self.images, self.index, self.cache = images.astype(np.float32), 0, cache
            self.device = torch.empty(images[:1].shape, dtype=torch.float32, device="cuda")

        def get_batch_size(self):
            return 1

        def get_batch(self, names):
            if self.index == 0:
                progress.step("calibrating int8, then building", total=len(self.images))
            if self.index >= len(self.images):
                return None
            self.device.copy_(torch.from_numpy(self.images[self.index:self.index + 1]))
            torch.cuda.synchronize()  # TensorRT reads the buffer on its own stream
            self.index += 1
            progress.advance()
            return [int(self.device.data_ptr())]

        def read_calibration_cache(self):
            return self.cache.read_bytes() if self.cache.exists() else None

        def write_calibration_cache(self, data):
            from vitexport.core.writer import write_atomic

            write_atomic(self.cache, bytes(data))

    return Calibrator()
