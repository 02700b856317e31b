"""A page in a headless Chromium, driven from Python: a local server for the page's files with the
headers WebAssembly threads need, the browser started and stopped, and a channel to the page (the
page asks GET /command for its next task, fetches GET /blob/NAME for data, and posts its answers to
POST /report). Every address lies under a random prefix that only the opened URL carries: any other
process on the machine, or a web page reaching the port (a DNS-rebound name, a cross-origin form), can
neither read the files nor take a task nor post a forged answer. Shared by bench (ONNX Runtime Web's rows) and a web package's check.py, which carries
this file as it is: standard library only, Python 3.8 or newer."""
from __future__ import annotations

import json
import os
import platform
import queue
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, unquote

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
# Chromium on a machine without a GPU: WebGPU through SwiftShader, Vulkan on the CPU (a software adapter).
SWIFTSHADER = ("--enable-features=Vulkan", "--use-vulkan=swiftshader", "--use-webgpu-adapter=swiftshader",
               "--enable-unsafe-swiftshader")
MAX_POST_BYTES = 512 * 2**20  # the most a caller may allow: every output value of every case, as JSON
DEFAULT_POST_BYTES = 64 * 2**20
COMMAND_WAIT_S = 20.0  # a page's GET /command waits this long for a task before it asks again
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript", ".mjs": "text/javascript",
         ".json": "application/json", ".wasm": "application/wasm"}


# Between us and the browser, a guard process: it starts the browser in a session of its own and ends
# that whole session when the browser is to stop, or when we are gone, even killed outright (a bench
# worker is killed with SIGKILL, which leaves it no chance to clean up).
GUARD = r"""
import os, shutil, signal, subprocess, sys, time
REMOVE_PROFILE
parent, log, profile = int(sys.argv[1]), sys.argv[2], sys.argv[3]
with open(log, "ab") as f:
    try:
        child = subprocess.Popen(sys.argv[4:], stdin=subprocess.DEVNULL, stdout=f, stderr=f, start_new_session=True)
    except OSError as e:  # not a program this machine can run: one line for the owner, and 127 as a shell says it
        f.write("cannot run {}: {}\n".format(sys.argv[4], e.strerror or e).encode("utf-8", "replace"))
        f.flush()  # os._exit flushes nothing
        os._exit(127)

def orphaned(wait_s=0.0):
    # The owner gone: it removes the profile itself (after reading the log) unless it was killed outright.
    deadline = time.monotonic() + wait_s
    while os.getppid() == parent and time.monotonic() < deadline:
        time.sleep(0.1)
    return os.getppid() != parent

def stop(signum=None, frame=None):
    try:
        os.killpg(child.pid, signal.SIGTERM)
        child.wait(timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except OSError:
            pass
    # A hangup or Ctrl-C reaches the owner's whole process group: give it a moment to end, or to stay.
    if orphaned(3.0 if signum in (signal.SIGHUP, signal.SIGINT) else 0.0):
        remove_profile(profile)
    os._exit(0)

for name in ("SIGTERM", "SIGINT", "SIGHUP"):
    if signal.getsignal(getattr(signal, name)) is not signal.SIG_IGN:  # ignored on purpose (a background job)
        signal.signal(getattr(signal, name), stop)
while child.poll() is None:
    if os.getppid() != parent:
        stop()
    time.sleep(0.2)
try:
    os.killpg(child.pid, signal.SIGKILL)  # its helpers, if any outlived it
except OSError:
    pass
if orphaned():
    remove_profile(profile)
sys.exit(child.returncode if child.returncode >= 0 else 128 - child.returncode)
"""


def remove_profile(profile):
    """Remove a browser's profile, and the folder Chromium made under TMPDIR for its singleton socket,
    which Chromium leaves behind (one more in /tmp per browser started): the profile's SingletonSocket
    link names it, and it goes only while it holds nothing but the socket and its cookie."""
    try:
        folder = os.path.dirname(os.readlink(os.path.join(profile, "SingletonSocket")))
        if os.path.isabs(folder) and set(os.listdir(folder)) <= {"SingletonSocket", "SingletonCookie"}:
            shutil.rmtree(folder, ignore_errors=True)
    except OSError:
        pass
    shutil.rmtree(profile, ignore_errors=True)


def guard_program():
    """The guard's source, with remove_profile's (one definition, run by us and by the guard)."""
    import inspect

    return GUARD.replace("REMOVE_PROFILE", inspect.getsource(remove_profile), 1)


class Unavailable(Exception):
    """No browser to run the page in."""


class Handler(BaseHTTPRequestHandler):
    """Only the files in `routes` (name -> path), cross-origin isolated so that the page may use
    SharedArrayBuffer; nothing else of the disk is reachable."""

    routes = {}
    blobs = {}
    commands = None  # queue.Queue of dicts for the page
    results = None  # queue.Queue of what the page posts
    prefix = "/"  # "/TOKEN/": every address lies below it
    max_post = DEFAULT_POST_BYTES

    def end_headers(self):
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def _send(self, body, kind):
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _allowed(self):
        """The request names this server (Host exactly 127.0.0.1:PORT or localhost:PORT: a DNS-rebound
        name is refused) and carries the secret prefix; returns the path below the prefix, or None
        after refusing it."""
        port = self.server.server_address[1]
        if self.headers.get("Host") not in ("127.0.0.1:{}".format(port), "localhost:{}".format(port)):
            self.send_error(403, "not this server's address")
            return None
        path = unquote(self.path.split("?", 1)[0].split("#", 1)[0])  # %-escapes decoded before the exact lookup
        if not path.startswith(self.prefix):
            self.send_error(404)
            return None
        return path[len(self.prefix):]

    def do_GET(self):
        name = self._allowed()
        if name is None:
            return
        if name == "command":
            try:
                task = self.commands.get(timeout=COMMAND_WAIT_S)
            except queue.Empty:
                task = {"op": "wait"}
            self._send(json.dumps(task).encode("utf-8"), "application/json")
        elif name.startswith("blob/") and name[5:] in self.blobs:
            self._send(self.blobs[name[5:]], "application/octet-stream")
        elif name in self.routes:
            try:
                with open(self.routes[name], "rb") as f:
                    body = f.read()
            except OSError:
                self.send_error(404)
                return
            self._send(body, TYPES.get(os.path.splitext(name)[1], "application/octet-stream"))
        else:
            self.send_error(404, "not a file of this page")

    def do_POST(self):
        name = self._allowed()
        if name != "report":
            if name is not None:  # None: already refused
                self.send_error(404)
            return
        port = self.server.server_address[1]
        # Only the page itself: a browser names the posting page's origin, and a cross-origin post of
        # application/json needs a preflight this server never grants.
        if self.headers.get("Origin") not in ("http://127.0.0.1:{}".format(port), "http://localhost:{}".format(port)):
            self.send_error(403, "only the page may post")
            return
        if self.headers.get("Content-Type", "").split(";")[0].strip().lower() != "application/json":
            self.send_error(415, "application/json only")
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if not 0 < length <= self.max_post:
            self.send_error(413)
            return
        body = self.rfile.read(length)
        self.send_response(204)
        self.end_headers()
        try:
            self.results.put(json.loads(body.decode("utf-8")))
        except ValueError as e:
            self.results.put({"error": "the page sent an unreadable answer ({})".format(e), "code": 1})

    def log_message(self, format, *args):  # quiet: the caller prints its own lines
        pass


class Server:
    """The page's files on 127.0.0.1 (`routes`: name -> path), with the command channel, under a random
    prefix (and `folder`, a name shown in the address). `max_post`: the largest answer taken, in bytes."""

    def __init__(self, routes, port=0, folder=None, max_post=DEFAULT_POST_BYTES):
        self.commands, self.results, self.blobs = queue.Queue(), queue.Queue(), {}
        self.token = secrets.token_urlsafe(24)
        self.prefix = "/{}/{}".format(self.token, folder + "/" if folder else "")
        handler = type("PageHandler", (Handler,), {
            "routes": dict(routes), "blobs": self.blobs, "commands": self.commands, "results": self.results,
            "prefix": self.prefix, "max_post": max(1, min(int(max_post), MAX_POST_BYTES))})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)  # OSError: the caller says why
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.port = self.httpd.server_address[1]

    def url(self, name):
        return "http://127.0.0.1:{}{}{}".format(self.port, quote(self.prefix), name)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def find_browser(given=None):
    """The browser to run: `given` (a path or a name on PATH), else the first Chromium on PATH.
    ValueError for a `given` that is not there, Unavailable when none is found."""
    if given:
        path = shutil.which(given) or (given if os.path.isfile(given) else None)
        if not path:
            raise ValueError("no such program: {}".format(given))
        if not os.access(path, os.X_OK):
            raise ValueError("{} is not an executable program".format(given))
        return path
    found = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if not found:
        raise Unavailable("no Chromium-based browser found ({}); install one (Debian: apt-get install chromium)"
                          .format(", ".join(BROWSERS)))
    return found


def browser_version(path):
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip().splitlines() or [None])[0]


class Browser:
    """A headless Chromium on `url` with a profile of its own, in its own session under a guard
    (stopping it stops its helper processes too; it stops when this process ends, however it ends). `webgpu`: WebGPU on ("default": the browser's adapter; "swiftshader":
    a software one on the CPU), or None."""

    def __init__(self, path, url, webgpu=None):
        self.profile = tempfile.mkdtemp(prefix="vitexport-browser-")
        self.log = os.path.join(self.profile, "browser.log")
        command = [path, "--headless=new", "--user-data-dir=" + self.profile, "--no-first-run",
                   "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
                   "--disable-component-update", "--disable-dev-shm-usage"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            command.append("--no-sandbox")  # Chromium refuses to run as root with its sandbox
        if webgpu:
            command.append("--enable-unsafe-webgpu")  # WebGPU on Linux is behind this flag
            if webgpu == "swiftshader":
                command += SWIFTSHADER
            elif platform.system() == "Linux":
                command.append("--enable-features=Vulkan")
        # Its log goes to a file: a pipe nobody reads would fill and stall it.
        try:
            self.process = subprocess.Popen([sys.executable, "-c", guard_program(), str(os.getpid()), self.log,
                                             self.profile, *command, url],
                                            stdin=subprocess.DEVNULL)
        except OSError as e:
            shutil.rmtree(self.profile, ignore_errors=True)
            raise Unavailable("cannot start the browser {}: {}".format(path, e.strerror or e))

    def exited(self):
        """None while it runs; else a sentence with its exit status and its log's last line."""
        if self.process.poll() is None:
            return None
        try:
            with open(self.log, "rb") as f:
                tail = f.read()[-4096:].decode("utf-8", "replace").strip().splitlines()
        except OSError:
            tail = []
        return "the browser exited ({}){}".format(self.process.returncode, ": " + tail[-1][:300] if tail else "")

    def close(self):
        if self.process.poll() is None:
            self.process.terminate()  # the guard stops the browser's whole session, then itself
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        remove_profile(self.profile)


def answer(server, browser, timeout_s):
    """The page's next post; TimeoutError after `timeout_s`, RuntimeError when the browser died,
    Unavailable when it could not even start (the guard's 127: not a program this machine runs)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return server.results.get(timeout=0.2)
        except queue.Empty:
            pass
        gone = browser.exited() if browser is not None else None
        if gone:
            raise Unavailable(gone) if browser.process.returncode == 127 else RuntimeError(gone)
    raise TimeoutError("no answer from the page within {:g} s".format(timeout_s))
