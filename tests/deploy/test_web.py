"""`vitexport package --target web` proven in a real Chromium (no mock of the browser): the package of
the deploy tests' shared ONNX export (one block at 32x32) copied elsewhere, its check.py run by a
fresh interpreter where vitexport cannot be imported, the page run on WebAssembly and on WebGPU
(SwiftShader: a software adapter on the CPU), each report judged by `vitexport verify
--device-report`; changed outputs and a changed model exit 4, no ONNX Runtime Web exits 3, bad
options exit 2, and Ctrl-C stops the check with the browser.

ONNX Runtime Web comes from the local copy in vitexport's cache (conftest's ort_web: npm once per
machine). Where Chromium is not installed the browser tests skip and say why; CI sets
VITEXPORT_REQUIRE_BROWSER, so there they fail instead."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from headless_chromium import browser_tmpdir
from device_harness import copy_to_device, run_check
from typer.testing import CliRunner

from vitexport.cli.app import app

pytestmark = pytest.mark.slow
QUICK = ("--repeats", "2", "--timeout-s", "240")


def why_no_browser() -> str | None:
    if not any(shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome", "chrome")):
        return "no Chromium on PATH (Debian: apt-get install chromium)"
    return None


@pytest.fixture(scope="session")
def browser() -> None:
    reason = why_no_browser()
    if reason:
        if os.environ.get("VITEXPORT_REQUIRE_BROWSER"):
            pytest.fail(f"VITEXPORT_REQUIRE_BROWSER is set but {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="session")
def web_package(exported, ort_web, tmp_path_factory) -> Path:
    """The web package of the shared ONNX export, written once (read-only: copy it to change it)."""
    from vitexport.deploy.package import package

    out = tmp_path_factory.mktemp("web-packages")
    return Path(package(exported("onnx"), "web", out_dir=out, runtime_from=ort_web)["package"])


@pytest.fixture(scope="session")
def wasm_run(web_package, browser, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """The package checked on WebAssembly from a copy, as a device would: (report, the check's run)."""
    device = copy_to_device(web_package, tmp_path_factory.mktemp("wasm"))
    done = run_check(device, *QUICK)
    return device / "device-report.json", done


def verify(*args: str):
    return CliRunner().invoke(app, ["verify", *args, "--json"])


def test_the_package_carries_onnx_runtime_web_the_page_and_a_whole_manifest(web_package):
    manifest = json.loads((web_package / "manifest.json").read_text())
    assert manifest["target"] == "web"
    assert manifest["runner"]["runtime"] == "ONNX Runtime Web 1.30.0"
    assert manifest["runner"]["settings"]["onnxruntime_web"] == "1.30.0"
    for name in ("index.html", "page.js", "check.py", "runner.js", "ort/ort.wasm.min.mjs", "ort/ort.webgpu.min.mjs",
                 "ort/ort-wasm-simd-threaded.wasm", "ort/ort-wasm-simd-threaded.asyncify.wasm",
                 "golden/golden.json", manifest["artifact"]["file"]):
        assert name in manifest["files"], name
    page = (web_package / "index.html").read_text() + (web_package / "page.js").read_text()
    assert "http://" not in page and "https://" not in page  # nothing from a CDN
    assert "ONNX Runtime Web 1.30.0" in (web_package / "README.md").read_text()


def test_the_readme_says_verify_gives_the_verdict_not_the_page(web_package):
    readme = (web_package / "README.md").read_text()
    assert "every output matches PyTorch" not in readme
    assert "every output is within the golden tolerance" in readme and "`vitexport verify --device-report`'s" in readme


def test_wasm_outputs_match_pytorch_in_chromium_and_verify_accepts_the_report(wasm_run):
    report_path, done = wasm_run
    assert done.returncode == 0, done.stderr + done.stdout
    # Within tolerance is not the verdict (verify also applies the precision's and the task's gates).
    assert "PASS" not in done.stdout and "every output within tolerance" in done.stdout
    assert "the verdict (with the precision's and the task's gates): vitexport verify" in done.stdout
    assert not (report_path.parent / "__pycache__").exists()  # the package as shipped, its report beside it
    report = json.loads(report_path.read_text())
    device = report["device"]
    assert device["provider"] == "wasm" and device["runtime"] == "ONNX Runtime Web 1.30.0"
    assert device["browser"].startswith(("Chromium", "Google Chrome"))
    # Served with COOP/COEP: the page is cross-origin isolated, so WebAssembly may use threads.
    assert device["cross_origin_isolated"] is True and device["wasm_threads"] >= min(2, os.cpu_count() or 1)
    timing = report["timings"]["cases"]["random-0"]
    assert timing["runs"] == 2 and timing["p50_ms"] > 0
    result = verify("--device-report", str(report_path))
    assert result.exit_code == 0, result.output
    parity = json.loads(result.stdout)["parity"]
    assert parity["passed"] and parity["max_abs_error"] < 1e-4


def test_the_package_runs_with_the_network_off(web_package, browser, tmp_path):
    """In a network namespace of its own, with only the loopback interface: nothing leaves the machine."""
    isolate = ["unshare", "--net", "sh", "-c", 'ip link set lo up 2>/dev/null || ifconfig lo up; exec "$@"', "sh"]
    if not shutil.which("unshare") or subprocess.run([*isolate, "true"], capture_output=True).returncode:
        pytest.skip("no network namespace here (unshare --net needs CAP_SYS_ADMIN)")
    device = copy_to_device(web_package, tmp_path)
    done = subprocess.run([*isolate, sys.executable, "-I", str(device / "check.py"), *QUICK], cwd=device,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout
    result = verify("--device-report", str(device / "device-report.json"))
    assert result.exit_code == 0, result.output


def test_changed_outputs_in_the_report_exit_4(wasm_run, tmp_path):
    report_path, done = wasm_run
    assert done.returncode == 0, done.stderr
    report = json.loads(report_path.read_text())
    values = report["cases"][0]["outputs"]["logits"]["data"]
    values[0] += 1.0
    changed = report_path.parent / "changed.json"
    changed.write_text(json.dumps(report))
    result = verify("--device-report", str(changed))
    assert result.exit_code == 4, result.output


def test_webgpu_runs_on_the_adapter_chromium_has_and_marks_a_software_one(web_package, browser, tmp_path):
    device = copy_to_device(web_package, tmp_path)
    done = run_check(device, "--ep", "webgpu", "--webgpu-adapter", "swiftshader", *QUICK)
    if done.returncode == 3 and "adapter" in done.stderr and not os.environ.get("VITEXPORT_REQUIRE_BROWSER"):
        pytest.skip(f"no WebGPU adapter in this Chromium: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr + done.stdout
    report = json.loads((device / "device-report.json").read_text())
    adapter = report["device"]["webgpu_adapter"]
    assert report["device"]["provider"] == "webgpu"
    assert adapter["architecture"] == "swiftshader" and adapter["software"] is True
    assert adapter["given_to_runtime"] is True  # the runtime ran on the adapter recorded
    assert "software" in report["device"]["compute_units"]
    placed = report["device"]["webgpu_cpu_nodes"]  # where ONNX Runtime put each node, read from its log
    assert placed["of"] > 0 and placed["of"] > placed["nodes"] and "MatMul" not in placed["ops"]
    result = verify("--device-report", str(device / "device-report.json"))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["device"]["webgpu_adapter"]["software"] is True


def test_a_browser_without_a_webgpu_adapter_exits_3(web_package, browser, tmp_path):
    """Chromium started without the flags that give WebGPU an adapter (headless Linux then has none)."""
    from vitexport.core.browser import find_browser

    wrapper = tmp_path / "chromium-without-webgpu"
    wrapper.write_text("#!/bin/sh\nfor a in \"$@\"; do\n  case \"$a\" in --enable-unsafe-webgpu|--enable-features=*|"
                       "--use-*|--enable-unsafe-swiftshader) ;; *) set -- \"$@\" \"$a\" ;; esac\n  shift\ndone\n"
                       f"exec {find_browser()} \"$@\"\n")
    wrapper.chmod(0o755)
    done = run_check(web_package, "--ep", "webgpu", "--browser", str(wrapper), "--report", str(tmp_path / "r.json"),
                     *QUICK)
    assert done.returncode == 3, done.stderr + done.stdout
    assert "no adapter" in done.stderr and "--webgpu-adapter swiftshader" in done.stderr
    assert not (tmp_path / "r.json").exists()


def test_int8_on_webgpu_names_the_operators_left_to_the_cpu(exported, ort_web, browser, tmp_path):
    from vitexport.deploy.package import package

    folder = Path(package(exported("onnx", precision="int8"), "web", out_dir=tmp_path, runtime_from=ort_web)["package"])
    done = run_check(folder, "--ep", "webgpu", "--webgpu-adapter", "swiftshader", *QUICK)
    if done.returncode == 3 and "adapter" in done.stderr and not os.environ.get("VITEXPORT_REQUIRE_BROWSER"):
        pytest.skip(f"no WebGPU adapter in this Chromium: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr + done.stdout
    placed = json.loads((folder / "device-report.json").read_text())["device"]["webgpu_cpu_nodes"]
    assert placed["ops"].get("MatMulInteger", 0) >= 1 and placed["ops"].get("DynamicQuantizeLinear", 0) >= 1
    assert "MatMulInteger" in done.stdout
    result = CliRunner().invoke(app, ["verify", "--device-report", str(folder / "device-report.json")])
    assert result.exit_code == 0, result.output
    assert "nodes ran on the CPU (WebAssembly)" in result.output and "MatMulInteger" in result.output


def test_a_changed_model_is_refused_before_the_browser_starts(web_package, tmp_path):
    device = copy_to_device(web_package, tmp_path)
    model = device / json.loads((device / "manifest.json").read_text())["artifact"]["file"]
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0xFF
    model.write_bytes(bytes(data))
    done = run_check(device, *QUICK, "--browser", "/nonexistent/browser")  # it must not get that far
    assert done.returncode == 4, done.stderr
    assert model.name in done.stderr and "sha256" in done.stderr and not (device / "device-report.json").exists()


def test_a_changed_file_is_refused_by_the_page_too(web_package, browser, tmp_path):
    """The page verifies every file itself: a browser opened by hand has no check.py in front of it."""
    import importlib.util

    device = copy_to_device(web_package, tmp_path)
    spec = importlib.util.spec_from_file_location("web_check", device / "check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    check.verify_files = lambda folder, manifest: set(manifest["files"])  # only the page checks now
    (device / "runner.js").write_text("export async function openRunner() { return null; }\n")
    with pytest.raises(check.Stop) as stop:
        check.main([*QUICK, "--report", str(tmp_path / "report.json")])
    assert stop.value.code == 4 and "runner.js" in str(stop.value) and "sha256" in str(stop.value)
    assert not (tmp_path / "report.json").exists()


def test_a_page_that_cannot_start_answers_at_once(web_package, browser, tmp_path):
    import importlib.util

    device = copy_to_device(web_package, tmp_path)
    spec = importlib.util.spec_from_file_location("web_check", device / "check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    check.verify_files = lambda folder, manifest: set(manifest["files"])  # as if it had been packaged so
    (device / "page.js").write_text("this is not JavaScript (\n")
    began = time.monotonic()
    with pytest.raises(check.Stop) as stop:
        check.main([*QUICK, "--report", str(tmp_path / "report.json")])
    assert stop.value.code == 1 and "the page failed" in str(stop.value) and time.monotonic() - began < 60


def test_without_onnx_runtime_web_or_npm_package_exits_3_naming_what_to_install(exported, tmp_path, monkeypatch):
    monkeypatch.delenv("VITEXPORT_ONNXRUNTIME_WEB", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no npm
    result = CliRunner().invoke(app, ["package", str(exported("onnx")), "--target", "web", "--out",
                                      str(tmp_path / "out"), "--quiet"])
    assert result.exit_code == 3, result.output
    assert "npm" in result.output and "--runtime-from" in result.output
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("args, words", [
    (["--runtime-from", "/nonexistent/onnxruntime-web.tgz"], "no such file"),
    (["--runtime-from", "{tmp}"], "package.json"),
    (["--target", "linux", "--runtime-from", "{tmp}"], "--runtime-from"),
])
def test_bad_package_options_exit_2(exported, tmp_path, args, words):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if "--target" not in args:
        args = ["--target", "web", *args]
    result = CliRunner().invoke(app, ["package", str(exported("onnx")), *args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert words in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("args", [("--ep", "metal"), ("--budget-s", "0"), ("--timeout-s", "nan"),
                                  ("--repeats", "2", "--budget-s", "1"), ("--threads", "-1")])
def test_bad_check_options_exit_2(web_package, args):
    done = run_check(web_package, *args, "--browser", "/nonexistent/browser")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.strip()


def default_sigint() -> None:
    """A Ctrl-C's disposition as in a terminal, whatever the suite inherited (a background job ignores it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_the_check_and_its_browser_within_seconds(web_package, browser, tmp_path):
    device = copy_to_device(web_package, tmp_path)
    code = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    check = subprocess.Popen([sys.executable, "-I", "-c", code, str(device / "check.py"), "--budget-s", "60"],
                             cwd=device, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=default_sigint)
    below = set()
    deadline = time.monotonic() + 60
    while len(below) < 3 and time.monotonic() < deadline:  # until the browser runs, with its helpers
        time.sleep(0.2)
        below = descendants(check.pid)
    assert len(below) >= 3, "the check started no browser"
    time.sleep(1.0)
    below |= descendants(check.pid)
    check.send_signal(signal.SIGINT)
    began = time.monotonic()
    check.communicate(timeout=20)
    assert check.returncode == 130 and time.monotonic() - began < 10
    assert not alive(below), "the browser was left running"
    assert not (device / "device-report.json").exists()


def test_a_killed_bench_worker_takes_its_browser_with_it(browser):
    """SIGKILL gives a process no chance to clean up: the browser's guard notices and stops it."""
    from vitexport.core.browser import find_browser

    program = find_browser()
    code = ("import sys, time; from vitexport.core.browser import Browser; "
            "b = Browser(sys.argv[1], 'about:blank'); print('up', flush=True); time.sleep(600)")
    worker = subprocess.Popen([sys.executable, "-c", code, program], stdout=subprocess.PIPE, text=True)
    assert worker.stdout.readline().strip() == "up"
    below = set()
    deadline = time.monotonic() + 30
    while len(below) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
        below = descendants(worker.pid)
    worker.kill()
    worker.wait()
    assert len(below) >= 3 and not alive(below, within_s=10), "the browser outlived its owner"


def descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*") if Path(f"/proc/{p}/task").exists() else ():
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            found.update(kids)
            todo.extend(kids)
    return found


def alive(pids: set[int], within_s: float = 5.0) -> set[int]:
    """Those of `pids` still running (not zombies) after waiting up to `within_s` for them to end."""
    deadline = time.monotonic() + within_s
    while True:
        running = {p for p in pids if state_of(p) not in ("Z", None)}
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.2)


def state_of(pid: int) -> str | None:
    try:
        line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("State"))
    except (OSError, StopIteration):
        return None
    return line.split()[1]


def bench(*args: str):
    return CliRunner().invoke(app, ["bench", *args, "--no-roofline", "--json"])


def test_bench_times_onnx_runtime_web_inside_the_page_beside_onnx_runtime(exported, ort_web, browser, wasm_run,
                                                                           tmp_path):
    result = bench(str(exported("onnx")), "--backend", "onnxruntime", "--backend", "onnxruntime-web", "--backend",
                   "onnxruntime-webgpu", "--budget-s", "0.5", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    rows = {r["backend"]: r for r in json.loads(result.stdout)["results"]}
    for name in ("onnxruntime", "onnxruntime-web", "onnxruntime-webgpu"):
        assert rows[name]["available"] and rows[name]["latency_ms"]["p50"] > 0, rows[name].get("reason")
    assert rows["onnxruntime-web"]["provider"].startswith("wasm, ")
    # A software adapter is named as such in the row (a SwiftShader row is a CPU's speed, not a GPU's).
    assert rows["onnxruntime-webgpu"]["provider"].startswith("webgpu, ")
    if "swiftshader" in rows["onnxruntime-webgpu"]["provider"]:
        assert rows["onnxruntime-webgpu"]["provider"].endswith("(software adapter)")
    assert (tmp_path / "bench-tiny.html").exists()
    # The web package's device report joins them under the bench name of what it ran.
    joined = CliRunner().invoke(app, ["compare", str(tmp_path / "bench-tiny.json"), str(wasm_run[0]), "--out",
                                      str(tmp_path / "cmp"), "--json"])
    assert joined.exit_code == 0, joined.output
    device = [r for r in json.loads(joined.stdout)["results"] if r.get("device_check")]
    assert [(r["backend"], r["device_check"]["verdict"]) for r in device] == [("onnxruntime-web",
                                                                                "verified on the device")]


def test_bench_says_why_a_browser_row_cannot_run(exported, tmp_path, monkeypatch):
    monkeypatch.setenv("VITEXPORT_BROWSER", str(tmp_path / "no-browser"))
    result = bench(str(exported("onnx")), "--backend", "onnxruntime-web", "--budget-s", "0.5", "--out", str(tmp_path))
    assert result.exit_code == 3, result.output
    assert "no such program" in result.output and "VITEXPORT_BROWSER" in result.output


@pytest.mark.parametrize("path", ["vitexport/deploy/device/web/check.py", "vitexport/core/browser.py"])
def test_the_web_check_runs_on_python_3_8_with_the_standard_library_alone(path):
    import ast

    tree = ast.parse((Path(__file__).parents[2] / path).read_text(), feature_version=(3, 8))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)


# --- the page's server: only the page may read, take tasks or answer ---------------------------------

def request(server, path: str, *, method: str = "GET", host: str | None = None, body: bytes | None = None,
            headers: dict | None = None) -> int:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    sent = {"Host": host or f"127.0.0.1:{server.port}", **(headers or {})}
    conn.request(method, path, body=body, headers=sent)
    status = conn.getresponse().status
    conn.close()
    return status


@pytest.fixture
def page_server(tmp_path):
    from vitexport.core.browser import Server

    (tmp_path / "index.html").write_text("<p>page</p>")
    server = Server({"index.html": str(tmp_path / "index.html")}, folder="pkg", max_post=1000)
    yield server
    server.close()


def test_the_server_refuses_requests_without_its_secret_prefix(page_server):
    from urllib.parse import urlsplit

    served = urlsplit(page_server.url("index.html")).path
    assert page_server.token in served and request(page_server, served) == 200
    for path in ("/index.html", "/pkg/index.html", "/wrong/pkg/index.html", "/command", "/blob/settings"):
        assert request(page_server, path) == 404, path
    page_server.commands.put({"op": "close"})
    assert request(page_server, "/command") == 404 and page_server.commands.qsize() == 1  # not taken


def test_the_server_refuses_another_host_name(page_server):
    """DNS rebinding: a page of evil.example resolved to 127.0.0.1 sends its own name as Host."""
    from urllib.parse import urlsplit

    served = urlsplit(page_server.url("index.html")).path
    assert request(page_server, served, host=f"localhost:{page_server.port}") == 200
    assert request(page_server, served.replace("index.html", "index%2Ehtml")) == 200  # decoded, then looked up
    assert request(page_server, served, host=f"evil.example:{page_server.port}") == 403
    assert request(page_server, served, host="127.0.0.1") == 403


def test_only_a_same_origin_json_post_of_a_bounded_size_is_an_answer(page_server):
    import queue
    from urllib.parse import urlsplit

    report = urlsplit(page_server.url("report")).path
    origin = f"http://127.0.0.1:{page_server.port}"
    body = json.dumps({"report": {}}).encode()
    forged = [
        ("/report", {"Origin": origin, "Content-Type": "application/json"}, body, 404),  # no prefix
        (report, {"Content-Type": "application/json"}, body, 403),  # no origin
        (report, {"Origin": "http://evil.example", "Content-Type": "application/json"}, body, 403),
        (report, {"Origin": origin, "Content-Type": "text/plain"}, body, 415),  # a simple cross-origin post
        (report, {"Origin": origin, "Content-Type": "application/json"}, b"[" + b"0," * 600 + b"0]", 413),
    ]
    for path, headers, data, status in forged:
        assert request(page_server, path, method="POST", headers=headers, body=data) == status, (headers, status)
    with pytest.raises(queue.Empty):
        page_server.results.get_nowait()
    assert request(page_server, report, method="POST", body=body,
                   headers={"Origin": origin, "Content-Type": "application/json; charset=utf-8"}) == 204
    assert page_server.results.get(timeout=5) == {"report": {}}


def test_serve_prints_the_address_with_its_secret_and_sizes_posts_from_the_golden_outputs(web_package, tmp_path):
    import importlib.util
    import urllib.request

    device = copy_to_device(web_package, tmp_path)
    spec = importlib.util.spec_from_file_location("web_check", device / "check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    manifest = json.loads((device / "manifest.json").read_text())
    assert 4 * 2**20 < check.report_bytes(manifest) < 64 * 2**20
    code = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    serving = subprocess.Popen([sys.executable, "-I", "-c", code, str(device / "check.py"), "--serve"],
                               cwd=device, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=default_sigint)
    try:
        line = serving.stdout.readline()
        url = next(word for word in line.split() if word.startswith("http://"))
        assert "/index.html" in url and len(url.split("/")[3]) >= 24, line
        with urllib.request.urlopen(url.replace("index.html", "manifest.json"), timeout=10) as answer:
            assert json.loads(answer.read())["schema"] == "vitexport.package/1"
        plain = url.split("/")[0] + "//" + url.split("/")[2] + "/manifest.json"
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(plain, timeout=10)
    finally:
        serving.send_signal(signal.SIGINT)
        serving.communicate(timeout=20)


# --- a browser that cannot run, an owner killed, an open that fails ------------------------------------

def test_a_browser_path_that_is_not_executable_exits_2_in_one_line(web_package, tmp_path):
    device = copy_to_device(web_package, tmp_path)
    program = tmp_path / "chromium"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o644)
    done = run_check(device, "--browser", str(program))
    assert done.returncode == 2, done.stderr
    assert "not an executable program" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_browser_the_machine_cannot_run_exits_3_in_one_line(web_package, tmp_path):
    """Executable but not a program here (another machine's binary): the guard says why and exits 127."""
    device = copy_to_device(web_package, tmp_path)
    program = tmp_path / "chromium"
    program.write_bytes(b"\x7fELF" + b"\0" * 60)
    program.chmod(0o755)
    done = run_check(device, "--browser", str(program))
    assert done.returncode == 3, done.stderr
    assert "cannot run" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.fixture
def scratch():
    with browser_tmpdir() as folder:
        yield folder


def test_a_closed_browser_leaves_nothing_in_the_temporary_folder(browser, scratch):
    """Chromium makes a folder of its own for its singleton socket under TMPDIR and never removes it:
    one per browser started, piling up in /tmp. It goes with the profile."""
    from vitexport.core.browser import find_browser

    code = ("import os, sys, time; from vitexport.core.browser import Browser; "
            "b = Browser(sys.argv[1], 'about:blank'); deadline = time.monotonic() + 30\n"
            "while not os.path.lexists(os.path.join(b.profile, 'SingletonSocket')) and time.monotonic() < deadline:\n"
            "    time.sleep(0.1)\n"
            "print(os.readlink(os.path.join(b.profile, 'SingletonSocket')), flush=True); b.close()")
    done = subprocess.run([sys.executable, "-c", code, find_browser()], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "TMPDIR": str(scratch)})
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).is_relative_to(scratch)  # the browser ran with that TMPDIR
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGHUP])
def test_a_killed_owner_leaves_no_browser_profile(browser, how, scratch):
    from vitexport.core.browser import find_browser

    code = ("import sys, time; from vitexport.core.browser import Browser; "
            "b = Browser(sys.argv[1], 'about:blank'); print(b.profile, flush=True); time.sleep(600)")
    owner = subprocess.Popen([sys.executable, "-c", code, find_browser()], stdout=subprocess.PIPE, text=True,
                             start_new_session=True, env={**os.environ, "TMPDIR": str(scratch)})
    profile = Path(owner.stdout.readline().strip())
    assert profile.name.startswith("vitexport-browser-") and profile.is_dir()
    deadline = time.monotonic() + 30
    while len(descendants(owner.pid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    below = descendants(owner.pid)
    owner.send_signal(how)
    owner.wait()
    assert not alive(below, within_s=10), "the browser outlived its owner"
    deadline = time.monotonic() + 10
    while profile.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not profile.exists(), "the browser's profile was left behind"
    assert list(scratch.iterdir()) == [], "the browser's temporary files were left behind"


def test_a_failed_open_stops_the_browser_and_the_server(exported, monkeypatch, tmp_path):
    from types import SimpleNamespace

    from vitexport.backends.onnx import browser as runner_module
    from vitexport.backends.onnx import web
    from vitexport.core import browser
    from vitexport.core.errors import RuntimeFailure

    started = {}

    class FakeBrowser:
        def __init__(self, program, url, webgpu=None):
            started["browser"], self.closed = self, False

        def exited(self):
            return None

        def close(self):
            self.closed = True

    real_server = browser.Server

    def server(*args, **kwargs):
        started["server"] = real_server(*args, **kwargs)
        return started["server"]

    monkeypatch.setattr(browser, "find_browser", lambda given=None: "chromium")
    monkeypatch.setattr(browser, "Browser", FakeBrowser)
    monkeypatch.setattr(browser, "Server", server)
    monkeypatch.setattr(web, "locate", lambda source=None: ("1.30.0", tmp_path))
    monkeypatch.setattr(web, "input_dtype", lambda path, name: "float32")
    monkeypatch.setattr(runner_module, "OPEN_TIMEOUT_S", 0.5)
    record = SimpleNamespace(input_names=["pixel_values"], output_names=["logits"], info={})
    runner = runner_module.BrowserRunner(exported("onnx"), record, "wasm")
    with pytest.raises(RuntimeFailure, match="no answer"):
        runner.open()
    assert started["browser"].closed and runner.browser is None and runner.server is None
    with pytest.raises(OSError):  # the port is closed
        request(started["server"], "/")


# --- ONNX Runtime Web: the pinned release's bytes only -----------------------------------------------

def runtime_copy(ort_web: Path, where: Path, *, version: str = "1.30.0", change: str | None = None) -> Path:
    """A copy of the cached release laid out as the npm package, its version or one file changed."""
    folder = where / "onnxruntime-web"
    (folder / "dist").mkdir(parents=True)
    meta = json.loads((ort_web / "package.json").read_text())
    (folder / "package.json").write_text(json.dumps(dict(meta, version=version)))
    for f in (ort_web / "dist").iterdir():
        shutil.copyfile(f, folder / "dist" / f.name)
    if change:
        with open(folder / "dist" / change, "ab") as f:
            f.write(b"\n// changed\n")
    return folder


def tarball(folder: Path) -> Path:
    import tarfile

    tgz = folder.with_suffix(".tgz")
    with tarfile.open(tgz, "w:gz", compresslevel=1) as tar:
        tar.add(folder, arcname="package")
    return tgz


def test_a_runtime_copy_of_another_version_or_with_changed_files_is_refused(exported, ort_web, tmp_path):
    changed = runtime_copy(ort_web, tmp_path / "a", change="ort.wasm.min.mjs")
    other = runtime_copy(ort_web, tmp_path / "b", version="1.29.0")
    for copy, words in ((changed, "sha256 differs"), (other, "1.29.0"), (tarball(changed), "sha256 differs")):
        result = CliRunner().invoke(app, ["package", str(exported("onnx")), "--target", "web", "--runtime-from",
                                          str(copy), "--out", str(tmp_path / "out"), "--quiet"])
        assert result.exit_code == 2, result.output
        assert words in result.output and "Traceback" not in result.output


def test_a_given_tarball_is_unpacked_apart_from_the_cache_and_used(ort_web, tmp_path, monkeypatch):
    from vitexport.backends.onnx import web

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cached = runtime_copy(ort_web, tmp_path / "cache" / "vitexport", change="ort.webgpu.min.mjs")
    cached.rename(tmp_path / "cache" / "vitexport" / "onnxruntime-web-1.30.0")
    (tmp_path / "cache" / "vitexport" / "onnxruntime-web").mkdir()
    shared = (tmp_path / "cache" / "vitexport" / "onnxruntime-web-1.30.0").rename(
        tmp_path / "cache" / "vitexport" / "onnxruntime-web" / "1.30.0")
    before = (shared / "dist" / "ort.webgpu.min.mjs").read_bytes()
    tgz = tarball(runtime_copy(ort_web, tmp_path / "given"))
    version, dist = web.locate(tgz)
    assert version == "1.30.0" and dist.parent.name.startswith("tgz-") and not web._differing(dist)
    assert (shared / "dist" / "ort.webgpu.min.mjs").read_bytes() == before  # the shared cache is left as it was


def test_a_changed_cache_is_not_carried(tmp_path, ort_web, monkeypatch):
    from vitexport.backends.onnx import web
    from vitexport.core.errors import BackendUnavailable

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no npm to fetch it again
    monkeypatch.delenv(web.ENV, raising=False)
    copy = runtime_copy(ort_web, tmp_path, change="ort-wasm-simd-threaded.wasm")
    (tmp_path / "cache" / "vitexport" / "onnxruntime-web").mkdir(parents=True)
    copy.rename(tmp_path / "cache" / "vitexport" / "onnxruntime-web" / "1.30.0")
    with pytest.raises(BackendUnavailable, match="npm"):
        web.locate()


def test_the_page_counts_rounds_as_roundstats_does_ties_to_even():
    """budget_s / 0.25 = 8.5 or 10.5: Python's round (and bench) take the even neighbour."""
    import re
    from importlib import resources

    from vitexport.core.roundstats import round_count

    node = shutil.which("node")
    if node is None:
        pytest.skip("no node to run the page's JavaScript")
    page = resources.files("vitexport.deploy.device.web").joinpath("page.js").read_text()
    parts = [re.search(r"^const %s = [^;]*;" % n, page, re.M).group(0) for n in ("BURST_S", "MIN_ROUNDS", "MAX_ROUNDS")]
    parts += [re.search(r"^function %s\(.*?^}$" % n, page, re.M | re.S).group(0) for n in ("roundHalfEven", "roundCount")]
    budgets = [2.125, 2.625, 3.0, 0.5, 60.0, 2.375]
    code = "\n".join(parts) + "\nconsole.log(JSON.stringify(%s.map(roundCount)));" % json.dumps(budgets)
    done = subprocess.run([node, "-e", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [round_count(b) for b in budgets]
