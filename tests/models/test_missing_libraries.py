"""An optional library that is not installed is "unavailable here" (exit 3) on every path, with the
`pip install` that brings it: a timm: or hf: spec, the user's own code importing it, real images."""

import sys

import pytest
from typer.testing import CliRunner

from vitexport.cli.app import app

NEEDS_EINOPS = "import einops\nimport torch\ndef make():\n    m = torch.nn.Flatten()\n    m.input_shape = (1, 3, 8, 8)\n    return m\n"
LAZY_EINOPS = "import torch\ndef make():\n    import einops\n    return torch.nn.Flatten()\n"


@pytest.mark.parametrize("case", ["timm", "hf", "file", "factory", "module", "images"])
def test_a_missing_optional_library_is_unavailable_with_its_extra(case, tmp_path, monkeypatch):
    args, hidden, hint = ["onnx", "--out", str(tmp_path / "out")], "einops", "pip install 'vitexport[timm]'"
    if case == "timm":
        args += ["--model", "timm:vit_tiny_patch16_224"]
        hidden = "timm"
    elif case == "hf":
        (tmp_path / "m").mkdir()
        (tmp_path / "m" / "model.safetensors").write_bytes(b"")
        (tmp_path / "m" / "config.json").write_text('{"architectures": ["ViTForImageClassification"], "model_type": "vit"}')
        args += ["--model", f"hf:{tmp_path / 'm'}"]
        hidden, hint = "transformers", "pip install 'vitexport[hf]'"
    elif case in ("file", "factory"):
        (tmp_path / "user.py").write_text(NEEDS_EINOPS if case == "file" else LAZY_EINOPS)
        args += ["--model", f"{tmp_path / 'user.py'}:make", "--input-shape", "1,3,8,8"]
    elif case == "module":
        (tmp_path / "userpkg").mkdir()
        (tmp_path / "userpkg" / "__init__.py").write_text("")
        (tmp_path / "userpkg" / "nets.py").write_text(NEEDS_EINOPS)
        monkeypatch.syspath_prepend(str(tmp_path))
        args += ["--model", "userpkg.nets:make"]
    else:
        args += ["--config", "tiny", "--set", "depth=1", "--images", "samples/images"]
        hidden, hint = "PIL", "pip install 'vitexport[samples]'"
    monkeypatch.setitem(sys.modules, hidden, None)  # importing it now raises ImportError
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 3, result.output
    line = " ".join(result.output.split())
    assert hint in line and f"{hidden}, which is not installed here" in line and "Traceback" not in line
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_users_module_that_is_not_there_is_still_bad_input(tmp_path):
    result = CliRunner().invoke(app, ["onnx", "--model", "no_such_pkg.nets:make", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "cannot import 'no_such_pkg.nets'" in result.output
