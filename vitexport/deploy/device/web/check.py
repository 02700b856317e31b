#!/usr/bin/env python3
"""Prove this package's model in a browser: verify every file, serve the folder on localhost with the
headers WebAssembly threads need, open index.html in a headless Chromium, wait for the page's verdict
and write device-report.json for `vitexport verify --device-report`.

usage: python3 check.py [--ep wasm|webgpu] [--browser PATH] [--webgpu-adapter default|swiftshader]
                        [--threads N] [--budget-s S] [--warmup-s S] [--repeats N] [--timeout-s S]
                        [--report PATH] [--serve]

The page (index.html, page.js) runs the model with ONNX Runtime Web from ort/ (the release named in
manifest.json), so nothing is fetched from the network. `--serve` only serves the folder: open the
address it prints in any browser, the page shows the verdict and saves the report.

Exit codes: 0 every output within the golden tolerance; 4 a file differs from manifest.json (nothing
runs) or an output is out of tolerance; 3 no browser, or the execution provider asked for (a WebGPU
adapter) is not available in it; 2 bad usage; 1 the browser or the runtime failed.

It needs Python 3.8 or newer and a Chromium-based browser, not vitexport: it is written by vitexport
but runs where vitexport is not installed.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import queue
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST_SCHEMA = "vitexport.package/1"
REPORT_SCHEMA = "vitexport.device-report/1"
OK, FAILURE, USAGE, UNAVAILABLE, MISMATCH = 0, 1, 2, 3, 4
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
# Chromium on a machine without a GPU: WebGPU through SwiftShader, Vulkan on the CPU (a software adapter).
SWIFTSHADER = ("--enable-features=Vulkan", "--use-vulkan=swiftshader", "--use-webgpu-adapter=swiftshader",
               "--enable-unsafe-swiftshader")
MAX_RESULT_BYTES = 512 * 2**20  # every output value of every case, as JSON
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
    returns the names, the only files the server will serve besides manifest.json."""
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


# --- the server -----------------------------------------------------------------------------------------

class Handler(SimpleHTTPRequestHandler):
    """The package's files only (those manifest.json lists, and itself), cross-origin isolated so that
    the page may use SharedArrayBuffer (WebAssembly threads); POST /report takes the page's result."""

    served = frozenset()
    results = None  # a queue.Queue the page's result goes into
    extensions_map = {".html": "text/html; charset=utf-8", ".js": "text/javascript", ".mjs": "text/javascript",
                      ".json": "application/json", ".wasm": "application/wasm", "": "application/octet-stream"}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, directory=str(HERE), **kwargs)

    def end_headers(self):
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def send_head(self):
        name = self.path.split("?", 1)[0].split("#", 1)[0].lstrip("/")
        if name == "":
            self.send_response(302)
            self.send_header("Location", "/index.html")
            self.end_headers()
            return None
        if name != "manifest.json" and name not in self.served:
            self.send_error(404, "not a file of this package")
            return None
        return super().send_head()

    def do_POST(self):
        if self.path != "/report":
            self.send_error(404)
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if not 0 < length <= MAX_RESULT_BYTES:
            self.send_error(413)
            return
        body = self.rfile.read(length)
        self.send_response(204)
        self.end_headers()
        try:
            self.results.put(json.loads(body.decode("utf-8")))
        except ValueError as e:
            self.results.put({"error": "the page sent an unreadable result ({})".format(e), "code": FAILURE})

    def log_message(self, format, *args):  # quiet: the check prints its own lines
        pass


def serve(served, port):
    results = queue.Queue()
    handler = type("PackageHandler", (Handler,), {"served": frozenset(served), "results": results})
    try:
        server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as e:
        raise Stop(USAGE, "cannot serve on 127.0.0.1:{}: {}".format(port, e.strerror or e))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, results


# --- the browser ----------------------------------------------------------------------------------------

def find_browser(given):
    if given:
        path = shutil.which(given) or (given if os.path.isfile(given) else None)
        if not path:
            raise Stop(USAGE, "--browser: no such program: {}".format(given))
        return path
    found = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if not found:
        raise Stop(UNAVAILABLE, "no Chromium-based browser found ({}); install one (Debian: apt-get install "
                                "chromium) or give --browser PATH".format(", ".join(BROWSERS)))
    return found


def browser_version(path):
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip().splitlines() or [None])[0]


def launch(path, url, args, profile):
    command = [path, "--headless=new", "--user-data-dir=" + profile, "--no-first-run", "--no-default-browser-check",
               "--disable-extensions", "--disable-background-networking", "--disable-component-update",
               "--disable-dev-shm-usage"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--no-sandbox")  # Chromium refuses to run as root with its sandbox
    if args.ep == "webgpu":
        command.append("--enable-unsafe-webgpu")  # WebGPU on Linux is behind this flag
        if args.webgpu_adapter == "swiftshader":
            command += SWIFTSHADER
        elif platform.system() == "Linux":
            command.append("--enable-features=Vulkan")
    # Its log goes to a file (a pipe nobody reads would fill and stall it); its own session, so that
    # stopping it stops its helper processes too.
    log = open(os.path.join(profile, "browser.log"), "wb")
    try:
        process = subprocess.Popen(command + [url], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                   start_new_session=True)
    except OSError as e:
        raise Stop(UNAVAILABLE, "cannot start the browser {}: {}".format(path, e.strerror or e))
    finally:
        log.close()
    process.log = os.path.join(profile, "browser.log")
    return process


def stop_browser(process):
    if process is None or process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except OSError:
            pass
        process.wait()


def wait_for(results, process, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return results.get(timeout=0.2)
        except queue.Empty:
            pass
        if process is not None and process.poll() is not None:
            with open(process.log, "rb") as f:
                tail = f.read()[-4096:].decode("utf-8", "replace").strip().splitlines()
            raise Stop(FAILURE, "the browser exited ({}) before the page's verdict{}".format(
                process.returncode, ": " + tail[-1][:300] if tail else ""))
    raise Stop(FAILURE, "no verdict from the page within {:g} s (--timeout-s)".format(timeout_s))


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
    browser = None if args.serve else find_browser(args.browser)
    server, results = serve(served, args.port)
    url = "http://127.0.0.1:{}/index.html".format(server.server_address[1])
    process, profile = None, None
    try:
        if args.serve:
            print("serving {} at {}?ep=wasm (or ?ep=webgpu); Ctrl-C stops".format(HERE.name, url), flush=True)
            while True:
                time.sleep(3600)
        profile = tempfile.mkdtemp(prefix="vitexport-browser-")
        started = time.perf_counter()
        process = launch(browser, url + query(args), args, profile)
        result = wait_for(results, process, args.timeout_s)
        seconds = time.perf_counter() - started
    finally:
        stop_browser(process)
        server.shutdown()
        server.server_close()
        if profile:
            shutil.rmtree(profile, ignore_errors=True)
    if not isinstance(result, dict) or "report" not in result:
        code = result.get("code") if isinstance(result, dict) else None
        raise Stop(code if code in (USAGE, UNAVAILABLE, MISMATCH) else FAILURE,
                   "the page: " + str(result.get("error") if isinstance(result, dict) else result)[:500])
    report = result["report"]
    report["package"]["name"] = HERE.name
    report["device"] = dict(machine_facts(), browser=browser_version(browser), **report["device"])
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
        manifest["artifact"]["file"], device.get("browser") or browser, device.get("runtime"),
        device.get("compute_units") or args.ep, report["package"]["files_verified"], seconds))
    placed = device.get("webgpu_cpu_nodes")
    if isinstance(placed, dict) and placed.get("of"):
        print("on WebGPU: {} of {} nodes ran on the CPU (WebAssembly){}".format(
            placed["nodes"], placed["of"], ": " + ", ".join("{} x{}".format(op, n) for op, n in sorted(
                placed.get("ops", {}).items(), key=lambda kv: -kv[1])) if placed.get("ops") else ""))
    tol = verdict["tolerance"]
    print("{} (atol {:g}, rtol {:g}, min cosine {}); report: {}".format(
        "PASS" if verdict["passed"] else "FAIL", tol["atol"], tol["rtol"], tol["min_cosine"], args.report))
    print("judge it: vitexport verify --device-report {} --package {}".format(args.report.name, HERE.name))
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
