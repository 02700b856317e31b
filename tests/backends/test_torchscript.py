"""TorchScript: traced, saved, reloaded; a damaged file is an error that names it."""

import numpy as np
import pytest
import torch

from vitexport import api, backends
from vitexport.core.errors import ParityError, RuntimeFailure
from vitexport.export import sidecar
from vitexport.models.sources import SourceSpec

TINY = SourceSpec("tiny", overrides={"depth": 1})


def test_dynamic_batch_is_traced_above_one_and_runs_any_batch(tmp_path):
    options = backends.get("torchscript").Options(dynamic_batch=True, max_batch=5)
    result = api.export("torchscript", TINY, options, tmp_path)
    assert result["info"]["trace_batch"] == 2 and result["parity"]["batches"] == [1, 3, 5]
    module = torch.jit.load(result["artifact"])
    assert module(torch.zeros(7, 3, 224, 224)).shape == (7, 1000)


def test_a_damaged_file_is_a_runtime_error_naming_it(tmp_path):
    result = api.export("torchscript", TINY, None, tmp_path)
    path = result["artifact"]
    with open(path, "r+b") as f:
        f.truncate(1000)
    record = sidecar.read(path)
    with pytest.raises(RuntimeFailure, match="cannot load TorchScript file"):
        with backends.get("torchscript").load(path, record):
            pass


def test_changed_weights_fail_verification(tmp_path):
    result = api.export("torchscript", TINY, None, tmp_path)
    module = torch.jit.load(result["artifact"])
    with torch.no_grad():
        module.head.bias.add_(np.float32(0.5))
    module.save(result["artifact"])
    with pytest.raises(ParityError):
        api.verify(result["artifact"])
