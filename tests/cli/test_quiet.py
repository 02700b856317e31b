"""Only vitexport's own words on the terminal: what libraries write (torch's deprecation warnings,
ONNX Runtime's and ExecuTorch's C++ log lines) is held back unless `--verbose`, and text that comes
from users or libraries is printed as written (no emoji codes, no markup, no hard wrap in a pipe)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from user_model import user_model

TINY = ["--config", "tiny", "--set", "depth=1"]

# The shapes library output takes: Python warnings (file:line: SomethingWarning, then the source
# line), loggers' level prefixes, glog/ONNX Runtime/ExecuTorch C++ prefixes, tracebacks.
LIBRARY_LINE = re.compile(r"\.py:\d+: \w*Warning|^\s+warnings\.warn|^(WARNING|INFO|DEBUG|ERROR)[: ]|"
                          r"^\[?[EWIF]\d{4}|\[[EWI]:onnxruntime|^\[[a-z_]+\.(cpp|cc|h):\d+\]|cpuinfo|Traceback")


def vitexport(args, cwd: Path, **env) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-m", "vitexport", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, **env})


def library_lines(run: subprocess.CompletedProcess) -> list[str]:
    return [line for line in (run.stdout + run.stderr).splitlines() if LIBRARY_LINE.search(line)]


def test_the_pattern_knows_library_lines():
    for line in ("/x/torch/jit/_serialization.py:176: FutureWarning: `torch.jit.load` is deprecated.",
                 "  warnings.warn(", "2026-11-26 [E:onnxruntime:Default, provider_bridge_ort.cc:2458] Failed",
                 "[cpuinfo_utils.cpp:71] Reading file /sys/devices/soc0/image_version",
                 "WARNING:root:Please specify parameters of num_heads and hidden_size"):
        assert LIBRARY_LINE.search(line), line
    for line in ("… exporting tiny to torchscript", "parity PASSED (atol 0.0001, rtol 0.001, min cosine 0.99999)",
                 " random b=1   6.9e-07    1.7e-07   4.9e-05   1.0000000     n/d       1   yes"):
        assert not LIBRARY_LINE.search(line), line


@pytest.mark.parametrize("args", [
    ["torchscript", *TINY],  # torch.jit.load's FutureWarning on reload
    ["onnx", *TINY, "--optimize", "auto"],  # ONNX Runtime's fusion optimiser logs its advice
])
def test_an_export_prints_only_vitexports_words(tmp_path, args):
    run = vitexport(args, tmp_path)
    assert run.returncode == 0, run.stderr
    assert library_lines(run) == []


def test_verbose_shows_what_libraries_wrote(tmp_path):
    run = vitexport(["torchscript", *TINY, "--verbose"], tmp_path)
    assert run.returncode == 0, run.stderr
    assert "what libraries wrote to stderr" in run.stderr
    assert "torch.jit.load" in run.stderr  # the warning held back above is there, not lost


def test_what_native_code_writes_to_descriptor_2_is_held_back_too():
    """C and C++ libraries (ONNX Runtime, ExecuTorch's cpuinfo) write to file descriptor 2 directly."""
    code = ("import os, sys, warnings\n"
            "from vitexport.core import chatter\n"
            "with chatter.held_back(verbose=sys.argv[1] == '1'):\n"
            "    os.write(2, b'[cpuinfo_utils.cpp:71] from C++\\n')\n"
            "    warnings.warn('from Python', FutureWarning)\n"
            "    chatter.stderr().write('vitexport says\\n')\n")
    quiet, verbose = (subprocess.run([sys.executable, "-c", code, flag], capture_output=True, text=True, timeout=60)
                      for flag in "01")
    assert quiet.stderr == "vitexport says\n"
    assert verbose.stderr.startswith("vitexport says\n") and "from C++" in verbose.stderr \
        and "from Python" in verbose.stderr


def test_a_package_and_its_check_print_only_their_own_words(tmp_path, shared_artifacts):
    """The export's own words are the test above's: the artifact here is the run's shared one (read-only;
    the spec of tests/deploy/device_harness.py, so the deploy tests' export serves both)."""
    from vitexport.backends.onnx.options import OnnxOptions
    from vitexport.models.sources import SourceSpec

    spec = SourceSpec("tiny", overrides={"depth": 1, "image_size": 32})
    artifact = shared_artifacts.built("onnx", spec, OnnxOptions())["artifact"]
    run = vitexport(["package", artifact, "--target", "linux", "--out", "pk"], tmp_path)
    assert run.returncode == 0, run.stderr
    assert library_lines(run) == []
    (package,) = [p for p in (tmp_path / "pk").iterdir() if p.is_dir()]
    # Timed by budget as by default, a quarter second per case (eight rounds, the fewest) instead of three.
    check = subprocess.run([sys.executable, "check.py", "--budget-s", "0.25"], cwd=package, capture_output=True,
                           text=True, timeout=300)
    assert check.returncode == 0, check.stderr
    assert "PASS" in check.stdout
    assert library_lines(check) == [] and check.stderr.strip() == ""


def test_library_and_user_text_is_printed_as_written(tmp_path):
    """`:runner:` would become an emoji and `[bold]` markup; in a pipe nothing is wrapped at 80 columns."""
    name = "androidx.test:runner:1.6.2 [bold]" + "long" * 30
    run = vitexport(["onnx", "--config", "tiny", "--set", f"{name}=1"], tmp_path)
    assert run.returncode == 2
    error = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and name in error[0]


# As a converter does: its log names the op, its exception a source line.
TRACE_FAILS = user_model(forward="""
if torch.jit.is_tracing():
    for i in range(40):
        print(f"converter: pass {i}", file=sys.stderr)
    print("converter: No conversion rule found for operations: aten::FloatImplicit", file=sys.stderr)
    print("converter: giving up", file=sys.stderr)
    raise RuntimeError("Check 'false' failed at src/frontends/unconverted_ops_report.cpp:151:\\n"
                       "FrontEnd API failed with GeneralFailure")
""")


def test_a_failed_export_shows_the_held_lines_that_explain_it(tmp_path):
    (tmp_path / "net.py").write_text(TRACE_FAILS)
    run = vitexport(["torchscript", "--model", "net.py:make", "--out", "out", "--quiet"], tmp_path)
    assert run.returncode == 1, run.stderr
    lines = run.stderr.splitlines()
    assert any(line.startswith("--- what libraries wrote to stderr before the failure") and "--verbose shows all"
               in line for line in lines), run.stderr
    assert "aten::FloatImplicit" in run.stderr and "converter: giving up" in run.stderr
    assert "converter: pass 3\n" not in run.stderr  # trimmed to what explains it
    # The library's own exception is not cut to its first line, which only names a source file.
    assert lines[-1].startswith("error: ") and "FrontEnd API failed with GeneralFailure" in lines[-1]
