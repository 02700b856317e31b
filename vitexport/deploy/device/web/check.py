#!/usr/bin/env python3
"""Prove this package's model in a browser: verify every file, serve the folder on localhost with the
headers WebAssembly threads need, open index.html in a headless Chromium, wait for the page's result
and write device-report.json for `vitexport verify --device-report`.

usage: python3 check.py [--ep wasm|webgpu] [--browser PATH] [--webgpu-adapter default|swiftshader]
                        [--threads N] [--budget-s S] [--warmup-s S] [--repeats N] [--timeout-s S]
                        [--report PATH] [--serve]

The page (index.html, page.js) runs the model with ONNX Runtime Web from ort/ (the release named in
manifest.json), so nothing is fetched from the network. `--serve` only serves the folder: open the
address it prints in any browser, the page shows its result and saves the report.

The page compares the outputs with PyTorch's within the golden tolerance (atol, rtol, cosine) only;
the verdict is `vitexport verify --device-report`'s, which also applies the precision's top-1 and
accuracy gates and the task's gates, as for every target.

Exit codes: 0 the page ran and every output is within the golden tolerance (the report is written for
verify to judge); 4 a file differs from manifest.json (nothing runs) or an output is out of tolerance; 3 no browser (or one this machine cannot run), or the execution provider asked for (a WebGPU
adapter) is not available in it; 2 bad usage; 1 the browser or the runtime failed.

It needs Python 3.8 or newer and a Chromium-based browser, not vitexport: it is written by vitexport
but runs where vitexport is not installed. The server and the browser are browser.py's (vitexport's
own, carried as it is), loaded only after its sha256 matched the manifest.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import platform
import signal
import stat
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

# The modules this check imports from the package would leave their bytecode in it (__pycache__):
# files its manifest does not list. The package stays as it was shipped.
sys.dont_write_bytecode = True
HERE = Path(__file__).resolve().parent
MANIFEST_SCHEMA = "vitexport.package/1"
REPORT_SCHEMA = "vitexport.device-report/1"
OK, FAILURE, USAGE, UNAVAILABLE, MISMATCH = 0, 1, 2, 3, 4
PAGE_FILES = ("index.html", "page.js")


class Stop(Exception):
    """Ends the check with one line and an exit code."""

    def __init__(self, code, line):
        super().__init__(line)
        self.code = code


def read_json(path, what):
    try:
        fd = os.open(str(path), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with open(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError("not a regular file")
            return json.loads(f.read(64 * 2**20).decode("utf-8"))
    except (OSError, ValueError) as e:
        raise Stop(USAGE, "cannot read {} {}: {}".format(what, path.name, e))


def sha256_of(path):
    fd = os.open(str(path), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("not a regular file")
        h = hashlib.sha256()
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_files(folder, manifest):
    """Every file manifest.json lists has its size and sha256 (exit 4 naming the first that does not);
    returns the names: the only files the server serves, besides manifest.json."""
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise Stop(USAGE, "manifest.json lists no files")
    for name in sorted(files):
        entry = files[name]
        parts = Path(name).parts
        if Path(name).is_absolute() or ".." in parts or not isinstance(entry, dict):
            raise Stop(USAGE, "manifest.json names {!r}, which is not a file of this package".format(name))
        path = folder.joinpath(*parts)
        try:
            digest = sha256_of(path) if os.lstat(str(path)).st_size == entry.get("size") else None
        except FileNotFoundError:
            raise Stop(MISMATCH, "{}: missing (manifest.json lists it): the package is incomplete".format(name))
        except OSError as e:
            raise Stop(MISMATCH, "{}: cannot be verified ({})".format(name, e.strerror or e))
        if digest != entry.get("sha256"):
            raise Stop(MISMATCH, "{}: sha256 differs from manifest.json: the file is damaged or was changed; "
                                 "copy the package again".format(name))
    return set(files)


def load_browser_module(served):
    """browser.py (vitexport/core/browser.py as it is: the server, the browser), from its verified file."""
    if "browser.py" not in served:
        raise Stop(USAGE, "manifest.json does not list browser.py, which this check runs the browser with: "
                          "package the artifact again")
    spec = importlib.util.spec_from_file_location("vitexport_package_browser", str(HERE / "browser.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the report -----------------------------------------------------------------------------------------

def first_line(path):
    try:
        with open(path, "rb") as f:
            return f.read(4096).split(b"\n")[0].replace(b"\0", b"").decode("utf-8", "replace").strip() or None
    except OSError:
        return None


def machine_facts():
    facts = {"os": platform.platform(), "machine": platform.machine(), "python": platform.python_version()}
    if platform.system() == "Linux":
        facts["model"] = first_line("/proc/device-tree/model") or first_line("/sys/devices/virtual/dmi/id/product_name")
        try:
            with open("/proc/cpuinfo") as f:
                facts["cpu"] = next((line.split(":", 1)[1].strip() for line in f
                                     if line.lower().startswith(("model name", "hardware"))), None)
        except OSError:
            facts["cpu"] = None
    return facts


def write_report(path, report):
    tmp = path.with_name(".{}.tmp{}".format(path.name, os.getpid()))
    try:
        with open(tmp, "w") as f:
            json.dump(report, f, allow_nan=False)
            f.write("\n")
        os.replace(str(tmp), str(path))
    finally:
        if tmp.exists():
            tmp.unlink()


def report_bytes(manifest):
    """The most the page's report may take as JSON: every golden output value written out (at most 32
    characters a float32), plus room for the timings; the server refuses a larger post."""
    golden = read_json(HERE / "golden" / "golden.json", "golden data")
    files = manifest["files"]
    try:
        values = sum(max(0, files[name]["size"] - 128) // 4 for case in golden["cases"] for name in case["outputs"])
    except (KeyError, TypeError) as e:
        raise Stop(USAGE, "golden/golden.json names outputs manifest.json does not list ({})".format(e))
    return values * 32 + 4 * 2**20


def arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ep", choices=("wasm", "webgpu"), default="wasm",
                        help="ONNX Runtime Web's execution provider (default wasm)")
    parser.add_argument("--browser", help="the Chromium-based browser to run (default: chromium or chrome on PATH)")
    parser.add_argument("--webgpu-adapter", choices=("default", "swiftshader"), default="default",
                        help="WebGPU's adapter: the browser's own (a GPU), or SwiftShader (software, on the CPU)")
    parser.add_argument("--threads", type=int, default=0, help="WebAssembly threads (default: the page's choice)")
    parser.add_argument("--budget-s", type=float, default=None, help="seconds of timed runs per case (default 3)")
    parser.add_argument("--warmup-s", type=float, default=None, help="seconds of untimed runs before each case")
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per case instead of a time budget")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="how long to wait for the page (default 600)")
    parser.add_argument("--report", type=Path, default=HERE / "device-report.json",
                        help="where to write the report (default: device-report.json in this folder)")
    parser.add_argument("--port", type=int, default=0, help="the port to serve on (default: a free one)")
    parser.add_argument("--serve", action="store_true", help="only serve the folder until Ctrl-C, for a browser "
                                                             "you open yourself")
    args = parser.parse_args(argv)
    if args.threads < 0 or not 0 <= args.port <= 65535 or (args.repeats is not None and args.repeats < 1):
        raise Stop(USAGE, "--threads must be >= 0, --port from 0 to 65535 and --repeats >= 1")
    if args.repeats is not None and args.budget_s is not None:
        raise Stop(USAGE, "give --budget-s (seconds per case) or --repeats (runs per case), not both")
    for name in ("budget_s", "warmup_s"):
        value = getattr(args, name)
        if value is not None and not 0 <= value <= 3600 or (name == "budget_s" and value == 0):
            raise Stop(USAGE, "--{} must be from 0 to 3600 seconds{}".format(
                name.replace("_", "-"), " and more than 0" if name == "budget_s" else ""))
    if not 0 < args.timeout_s <= 86400:  # also NaN
        raise Stop(USAGE, "--timeout-s must be more than 0 and at most a day")
    return args


def query(args):
    parts = ["ep=" + args.ep, "threads={}".format(args.threads), "report=post"]
    for name in ("budget_s", "warmup_s", "repeats"):
        if getattr(args, name) is not None:
            parts.append("{}={}".format(name, getattr(args, name)))
    return "?" + "&".join(parts)


def main(argv=None):
    args = arguments(argv)
    manifest = read_json(HERE / "manifest.json", "manifest")
    if not isinstance(manifest, dict) or manifest.get("schema") != MANIFEST_SCHEMA:
        raise Stop(USAGE, "manifest.json is not a vitexport package manifest ({})".format(MANIFEST_SCHEMA))
    served = verify_files(HERE, manifest)  # before anything of the package is served or run
    missing = [n for n in PAGE_FILES if n not in served]
    if missing:
        raise Stop(USAGE, "manifest.json does not list {}: package the artifact again".format(", ".join(missing)))
    web = load_browser_module(served)
    browser_path = None
    if not args.serve:
        try:
            browser_path = web.find_browser(args.browser)
        except ValueError as e:
            raise Stop(USAGE, "--browser: {}".format(e))
        except web.Unavailable as e:
            raise Stop(UNAVAILABLE, "{}, or give --browser PATH".format(e))
    routes = {name: str(HERE.joinpath(*name.split("/"))) for name in served | {"manifest.json"}}
    try:
        server = web.Server(routes, args.port, folder=HERE.name, max_post=report_bytes(manifest))
    except OSError as e:
        raise Stop(USAGE, "cannot serve on 127.0.0.1:{}: {}".format(args.port, e.strerror or e))
    url = server.url("index.html")
    browser = None
    try:
        if args.serve:
            print("serving {} at {}?ep=wasm (or ?ep=webgpu); Ctrl-C stops".format(HERE.name, url), flush=True)
            while True:
                time.sleep(3600)
        started = time.perf_counter()
        try:
            browser = web.Browser(browser_path, url + query(args),
                                  webgpu=args.webgpu_adapter if args.ep == "webgpu" else None)
            result = web.answer(server, browser, args.timeout_s)
        except web.Unavailable as e:
            raise Stop(UNAVAILABLE, str(e))
        except RuntimeError as e:
            raise Stop(FAILURE, "{} before the page's verdict".format(e))
        except TimeoutError:
            raise Stop(FAILURE, "no verdict from the page within {:g} s (--timeout-s)".format(args.timeout_s))
        seconds = time.perf_counter() - started
    finally:
        if browser is not None:
            browser.close()
        server.close()
    if not isinstance(result, dict) or "report" not in result:
        code = result.get("code") if isinstance(result, dict) else None
        raise Stop(code if code in (USAGE, UNAVAILABLE, MISMATCH) else FAILURE,
                   "the page: " + str(result.get("error") if isinstance(result, dict) else result)[:500])
    report = result["report"]
    report["package"]["name"] = HERE.name
    report["device"] = dict(machine_facts(), browser=web.browser_version(browser_path), **report["device"])
    report["created"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    args.report = args.report if args.report.is_absolute() else Path.cwd() / args.report
    write_report(args.report, report)
    verdict = report["verdict"]
    for case in report["cases"]:
        timing = report["timings"]["cases"][case["name"]]
        for c in case["checks"]:
            print("  {:<14} {:<12} max |d| {:<9} cosine {:<9} {:>8.3f} ms  {}".format(
                case["name"], c["output"], "{:.3g}".format(c["max_abs_error"]) if isinstance(
                    c.get("max_abs_error"), (int, float)) else str(c.get("max_abs_error")),
                "{:.6f}".format(c["cosine_similarity"]) if c.get("cosine_similarity") is not None else "n/d",
                timing["p50_ms"], "ok" if c["passed"] else "FAIL: " + str(c["reason"])))
    device = report["device"]
    print("{} in {} with {} ({}): {} files verified in the page, {:.1f} s in the browser".format(
        manifest["artifact"]["file"], device.get("browser") or browser_path, device.get("runtime"),
        device.get("compute_units") or args.ep, report["package"]["files_verified"], seconds))
    placed = device.get("webgpu_cpu_nodes")
    if isinstance(placed, dict) and placed.get("of"):
        print("on WebGPU: {} of {} nodes ran on the CPU (WebAssembly){}".format(
            placed["nodes"], placed["of"], ": " + ", ".join("{} x{}".format(op, n) for op, n in sorted(
                placed.get("ops", {}).items(), key=lambda kv: -kv[1])) if placed.get("ops") else ""))
    tol = verdict["tolerance"]
    # Within tolerance is not a pass: the precision's top-1 and accuracy gates and the task's gates
    # need numbers this numpy-free check does not compute, so the verdict is verify's.
    print("{} (atol {:g}, rtol {:g}, min cosine {}); report: {}".format(
        "every output within tolerance" if verdict["passed"] else "FAIL: outputs out of tolerance",
        tol["atol"], tol["rtol"], tol["min_cosine"], args.report))
    print("the verdict (with the precision's and the task's gates): vitexport verify --device-report {} --package {}"
          .format(args.report.name, HERE.name))
    return OK if verdict["passed"] else MISMATCH


def terminated(signum, frame):
    raise SystemExit(128 + signum)  # unwinds through main's finally: the browser and the server stop


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, terminated)
    try:
        sys.exit(main())
    except Stop as stop:
        print("check: " + str(stop), file=sys.stderr)
        sys.exit(stop.code)
    except KeyboardInterrupt:
        sys.exit(130)
