"""The CLI contract: commands, --json fields, exit codes, one-line errors."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner
from zoo_models import zoo_spec

from vitexport.cli.app import app

runner = CliRunner()
FAST = ["--set", "depth=1"]


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_help_does_not_import_torch():
    code = "import sys; from vitexport.cli.app import app; assert 'torch' not in sys.modules and 'numpy' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
    out = subprocess.run([sys.executable, "-m", "vitexport", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "onnx" in out.stdout


def test_configs_lists_presets_with_sizes():
    result = invoke("configs", "--json")
    assert result.exit_code == 0
    rows = {r["name"]: r for r in json.loads(result.stdout)["presets"]}
    assert {"tiny", "small", "base", "large", "huge"} <= set(rows)
    assert rows["base"]["params_m"] == pytest.approx(86.6, abs=0.1)
    table = invoke("configs")
    assert "tiny" in table.stdout and "86.6" in table.stdout


@pytest.mark.parametrize("command", ["onnx", "torchscript"])
def test_export_json_contract(command, tmp_path):
    result = invoke(command, "--config", "tiny", *FAST, "--out", tmp_path, "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["backend"] == command
    for key in ("passed", "max_abs_error", "mean_abs_error", "cosine_similarity", "top1_agreement", "atol", "rtol"):
        assert key in data["parity"]
    assert data["parity"]["passed"] is True
    verify = invoke("verify", data["artifact"], "--json")
    assert verify.exit_code == 0 and json.loads(verify.stdout)["parity"]["passed"]


def test_human_output_shows_table_and_path(tmp_path):
    result = invoke("onnx", "--config", "tiny", *FAST, "--out", tmp_path)
    assert result.exit_code == 0
    assert "max |Δ|" in result.stdout and "PASSED" in result.stdout
    assert str(tmp_path / "tiny-depth1.onnx") in result.stdout.replace("\n", "")  # --set is in the name


def test_no_verify_skips_parity(tmp_path):
    result = invoke("onnx", "--config", "tiny", *FAST, "--out", tmp_path, "--no-verify", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["parity"] is None


def test_parity_failure_exits_4_and_prints_json(tmp_path):
    # atol 0 / rtol 0: ONNX Runtime's float32 kernels differ from PyTorch's in the last bits.
    result = invoke("onnx", "--config", "tiny", *FAST, "--out", tmp_path, "--atol", "0", "--rtol", "0", "--json")
    assert result.exit_code == 4
    assert json.loads(result.stdout)["parity"]["passed"] is False
    assert "parity failed" in result.stderr


def test_corrupted_artifact_fails_verify_with_4(tmp_path):
    art = tmp_path / "tiny-depth1.pt"
    assert invoke("torchscript", "--config", "tiny", *FAST, "--out", tmp_path).exit_code == 0
    import torch

    module = torch.jit.load(str(art))
    with torch.no_grad():
        module.head.weight.add_(0.1)
    module.save(str(art))
    result = invoke("verify", art)
    assert result.exit_code == 4 and "changed since export" in result.stdout


def checkpoint(tmp_path, kind):
    """Bad checkpoints of several kinds, for the error table below."""
    import torch
    from safetensors.torch import save_file

    path = tmp_path / ("w.pt" if kind in ("pickle", "zip") else "w.safetensors")
    if kind == "corrupt":
        path.write_bytes(b"\x00" * 64)
    elif kind == "zip":
        path.write_bytes(b"PK\x03\x04 not really a zip")
    elif kind == "pickle":
        torch.save({"state": {}, "fn": print}, path)
    elif kind == "mismatch":
        save_file({"head.weight": torch.zeros(3, 3)}, str(path))
    return path


BAD_INPUTS = [
    # (args, expected exit code, message fragment)
    (["onnx", "--config", "no-such-preset"], 2, "unknown preset 'no-such-preset'"),
    (["onnx", "--config", "tiny", "--set", "image_size=225"], 2, "not divisible by patch size"),
    (["onnx", "--config", "tiny", "--set", "num_heads=5"], 2, "does not divide embed_dim"),
    (["onnx", "--config", "tiny", "--set", "depht=2"], 2, "unknown config field 'depht'"),
    (["onnx", "--config", "tiny", "--set", "depth"], 2, "expects KEY=VALUE"),
    (["onnx", "--config", "tiny", "--model", "torchvision:vit_b_16"], 2, "either --config or --model"),
    (["onnx", "--config", "tiny", "--opset", "11"], 2, "opset 11 is not supported"),
    (["onnx", "--config", "tiny", "--exporter", "tflite"], 2, "--exporter must be one of"),
    (["onnx", "--config", "tiny", "--input-shape", "1,3,224"], 2, "N,C,H,W"),
    (["onnx", "--config", "tiny", "--input-shape", "1,3,64,64"], 2, "does not match the preset"),
    (["onnx", "--model", "nowhere/model.py:make"], 2, "model file not found"),
    (["onnx", "--model", "torchvision:resnet18"], 2, "unknown torchvision ViT"),
    (["onnx", "--model", "{zoo}:no_factory"], 2, "no callable named 'no_factory'"),
    (["onnx", "--config", "tiny", "--weights", "{tmp}/missing.safetensors"], 2, "weights file not found"),
    (["onnx", "--config", "tiny", "--weights", "{corrupt}"], 2, "corrupt safetensors"),
    (["onnx", "--config", "tiny", "--weights", "{zip}"], 2, "cannot read checkpoint"),
    (["onnx", "--config", "tiny", "--weights", "{pickle}"], 2, "--allow-pickle"),
    (["onnx", "--config", "tiny", "--weights", "{mismatch}"], 2, "missing: blocks.0"),
    (["onnx", "--config", "tiny", "--out", "/proc/vitexport-out"], 2, "cannot write to output directory"),
    (["verify", "{tmp}/nothing.onnx"], 2, "artifact not found"),
    (["verify", "{orphan}"], 2, "no sidecar"),
    (["bogus-command"], 2, "No such command"),
]


@pytest.mark.parametrize("args,code,message", BAD_INPUTS, ids=[m for _, _, m in BAD_INPUTS])
def test_bad_input_exits_with_one_line(tmp_path, args, code, message):
    orphan = tmp_path / "orphan.onnx"
    orphan.write_bytes(b"")
    values = {"tmp": tmp_path, "zoo": zoo_spec("stock_vit").rsplit(":", 1)[0], "orphan": orphan}
    values.update({k: checkpoint(tmp_path, k) for k in ("corrupt", "zip", "pickle", "mismatch") if f"{{{k}}}" in
                   " ".join(args)})
    args = [a.format(**values) for a in args]
    if "--out" not in args and args[0] != "verify" and args[0] != "bogus-command":
        args += ["--out", str(tmp_path / "out")]
    result = invoke(*args)
    assert result.exit_code == code, (result.stdout, result.stderr)
    text = result.stderr + result.stdout
    assert message in text
    assert "Traceback" not in text
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_bench_and_compare_end_to_end(tmp_path):
    args = ["bench", "--config", "tiny", "--set", "depth=1", "--backend", "torch", "--backend", "onnxruntime",
            "--backend", "torch-cuda", "--batch", "1", "--batch", "2", "--iters", "3", "--warmup-iters", "1",
            "--warmup-s", "0", "--no-roofline", "--out", tmp_path, "--json"]
    result = invoke(*args)
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    written = json.loads((tmp_path / "bench-tiny.json").read_text())
    assert {k: v for k, v in data.items() if k != "files"} == written  # stdout: the report it wrote, and where
    rows = {(r["backend"], r["batch_size"]): r for r in data["results"]}
    assert set(rows) == {(b, n) for b in ("torch", "onnxruntime", "torch-cuda") for n in (1, 2)}
    for key in (("torch", 1), ("onnxruntime", 2)):
        assert rows[key]["available"] and rows[key]["iterations"] == 3
        assert {"mean", "p50", "p90", "p99"} <= set(rows[key]["latency_ms"]) and rows[key]["throughput_ips"] > 0
    assert rows[("onnxruntime", 1)]["provider"] == "CPUExecutionProvider"
    import torch

    assert rows[("torch-cuda", 1)]["available"] is torch.cuda.is_available()
    assert data["fingerprint"]["threads"] == data["settings"]["threads"]
    # Each row says how its artifact was checked (the HTML report charts it against latency).
    assert rows[("torch", 1)]["verification"] == {"status": "reference"}
    check = rows[("onnxruntime", 1)]["verification"]
    assert check["status"] == "verified" and check["cosine_similarity"] > 0.9999
    assert "vitexport bench" in (tmp_path / "bench-tiny.html").read_text()
    merged = invoke("compare", tmp_path / "bench-tiny.json", tmp_path / "bench-tiny.json", "--out", tmp_path / "merged", "--json")
    assert merged.exit_code == 0 and json.loads(merged.stdout)["ranking"]["1"]
    assert json.loads(merged.stdout)["files"]["html"] == str(tmp_path / "merged" / "compare.html")
    assert "vitexport compare" in (tmp_path / "merged" / "compare.html").read_text()


def test_bench_rejects_unknown_backends(tmp_path):
    result = invoke("bench", "--config", "tiny", "--backend", "tflite", "--out", tmp_path)
    assert result.exit_code == 2 and "unknown bench backend" in result.stderr


def test_error_text_with_brackets_survives(tmp_path, monkeypatch):
    from vitexport.backends.onnx import OnnxBackend
    from vitexport.core.errors import BackendUnavailable

    def missing(self):
        raise BackendUnavailable("install it: pip install 'vitexport[coreml]'")

    monkeypatch.setattr(OnnxBackend, "availability", missing)
    result = invoke("onnx", "--config", "tiny", "--out", tmp_path)
    assert result.exit_code == 3 and "vitexport[coreml]" in result.stderr


def test_coreml_command_maps_its_flags(tmp_path):
    pytest.importorskip("coremltools")
    result = invoke("coreml", "--config", "tiny", *FAST, "--precision", "fp32", "--target", "iOS18",
                    "--batch", "1", "--batch", "2", "--author", "Team", "--out", tmp_path, "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["options"]["target"] == "iOS18" and data["options"]["batch_sizes"] == [1, 2]
    assert data["info"]["batch_sizes"] == [1, 2] and data["parity"]["batches"] == [1, 2]
    assert data["precision"] == "fp32" and data["parity"]["passed"]
    bad = invoke("coreml", "--config", "tiny", "--batch", "1,two", "--out", tmp_path)
    assert bad.exit_code == 2 and "--batch expects comma-separated integers" in bad.stderr


def test_tensorrt_command_maps_its_flags(tmp_path):
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT-RTX wheels not installed")
    result = invoke("tensorrt", "--config", "tiny", *FAST, "--builder", "rtx", "--max-batch", "4", "--opt-batch", "2",
                    "--rtx-targets", "sm86,SM89", "--out", tmp_path, "--json")
    data = json.loads(result.stdout)
    # Built but not run without a GPU: published unverified, exit 3 (unavailable here: the check).
    assert result.exit_code == (3 if data["status"] == "not-checked-here" else 0), result.stderr
    assert data["info"]["profiles"] == [[1, 2, 4]] and data["info"]["compute_targets"] == ["SM86", "SM89"]
    assert data["options"]["builder"] == "rtx" and data["dynamic_batch"] is True
    onnx_record = json.loads((tmp_path / "tiny-depth1-dynamic.onnx.json").read_text())  # a dynamic upstream says so
    assert onnx_record["dynamic_batch"] is True and onnx_record["parity"]["batches"] == [1, 3, 4]
    if data["parity"]["passed"] is None:  # no GPU here: the engine was built, not run
        assert data["status"] == "not-checked-here" and "GPU" in data["parity"]["skipped"]
        assert "published unverified" in result.stderr and (tmp_path / "tiny-depth1-dynamic.engine").exists()
