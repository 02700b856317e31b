"""The Ray side of a matrix run, in a process of its own: `python -m vitexport.matrix.ray_driver`.

Ray's core is C++ in the process that calls it, and it can end that process without a word: a
transfer through the object store after this machine's node died, or a crash (SIGSEGV) in one of
its own threads while a node goes. The run's bookkeeping (which cells finished, the report, the
line that says why, the exit code) must outlive that. So `RayPool` lives in a child process, and the
run talks to it through `RayDriver`, a pool with the same methods that forwards each call over a
socket. When the child dies, the run ends as on a lost cluster: `ClusterLost`, its one line and exit
1, every finished cell kept. Ctrl-C reaches the whole process group: the child ignores it, and the
run decides (it asks the child to cancel what is out, then to close).

Messages are pickled over a socketpair (`multiprocessing.connection.Connection`): the run sends
(method, args); the child answers ("ok", value) or ("raise", class, message), after any ("say",
line) its pool said while working. Tickets cross as numbers; the run keeps the objects.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from multiprocessing.connection import Connection
from typing import Any, Callable

from vitexport.core.errors import ClusterLost, VitexportError

EXIT_WAIT_S = 10  # how long the child gets to leave the cluster after `close` before it is killed


class RayDriver:
    """The pool a `--ray` run uses: RayPool's methods, run in the child process."""

    def __init__(self, address: str, device: str, node_wait: float, say: Callable[[str], None] | None = None):
        from vitexport.matrix.ray_pool import check_installed
        from vitexport.matrix.worker import child_environment

        check_installed()
        self.address, self.say = address, say or (lambda line: None)
        ours, theirs = socket.socketpair()
        with theirs:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "vitexport.matrix.ray_driver", str(theirs.fileno()), address, device,
                 repr(float(node_wait))], pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                env=child_environment())
        self.conn = Connection(ours.detach())
        self.tickets: dict[int, tuple[Any, str]] = {}  # the work out (ticket, kind), by the number the child knows
        self.owed = 0  # answers still to come to calls that a signal interrupted
        try:
            self.call("start")  # joins (or starts) the cluster: refusals come back as our errors
        except BaseException:
            self.close(asked=False)
            raise

    def where(self) -> str:
        from vitexport.matrix.ray_pool import where

        return where(self.address)

    def devices(self, names: tuple[str, ...], threads: int | None) -> dict[str, dict]:
        return self.call("devices", names, threads)

    def submit(self, ticket: Any, kind: str, job: dict, device: str | None = None) -> None:
        number = id(ticket)
        self.call("submit", number, kind, job, device)
        self.tickets[number] = (ticket, kind)

    def collect(self, timeout: float) -> list[tuple[Any, dict]]:
        if not self.tickets:
            return []
        return [(self.tickets.pop(number)[0], result) for number, result in self.call("collect", timeout)]

    @property
    def busy(self) -> bool:
        return bool(self.tickets)

    def cancel(self, lost: bool = False) -> str | None:
        """Cancel the work out and say which: what this run has not had an answer for (an answer a
        signal cut off counts as out, as its cell ends `cancelled`); None when nothing was."""
        from vitexport.matrix.ray_pool import tasks

        kinds, self.tickets = [kind for _, kind in self.tickets.values()], {}
        if self.alive():
            try:
                self.call("cancel", lost)
            except ClusterLost:  # it died just now: Ray ends a dead driver's tasks
                pass
            else:
                return f"cancelled {tasks(kinds)} on {self.where()}" if kinds else None
        return f"its {tasks(kinds)} ended with it" if kinds else None

    def close(self, asked: bool = True) -> None:
        """Let the child leave the cluster (stopping one it started) and end; kill it if it hangs.
        `asked`: call the pool's close first (not when it never started)."""
        try:
            if asked and self.alive():
                self.call("close")
        except ClusterLost:  # the child is gone already: nothing of the run's is lost with it
            pass
        finally:
            self.conn.close()  # end of input: the child exits
            try:
                self.proc.wait(timeout=EXIT_WAIT_S)
            except subprocess.TimeoutExpired:  # waiting on a lost head, say: the run is over regardless
                self.proc.kill()
                self.proc.wait()

    # -- the channel ---------------------------------------------------------------------------------
    def alive(self) -> bool:
        return self.proc.poll() is None and not self.conn.closed

    def call(self, method: str, *args: Any) -> Any:
        try:
            while self.owed:  # the answer to a call a signal interrupted comes first: the run is ending
                try:
                    self._answer()
                except (VitexportError, RuntimeError):
                    pass
            self.conn.send((method, args))
            self.owed += 1
            return self._answer()
        except (EOFError, OSError):
            raise ClusterLost(f"lost {self.where()}: {self.died()}") from None

    def _answer(self) -> Any:
        """The answer to the oldest call still owed one (after the lines said meanwhile)."""
        while True:
            message = self.conn.recv()
            if message[0] == "say":
                self.say(message[1])
                continue
            self.owed -= 1
            if message[0] == "ok":
                return message[1]
            raise rebuilt(*message[1:])

    def died(self) -> str:
        """How the child ended, in words."""
        try:
            code = self.proc.wait(timeout=EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            return "the process that talks to it stopped answering"
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"ended with exit {code}"
        return f"the process that talks to it (python -m vitexport.matrix.ray_driver) {how}, inside Ray"


def rebuilt(kind: str, message: str) -> BaseException:
    """The child's exception, as the run raises it: vitexport's own errors keep their class (and so
    their exit code); anything else is a bug of the child's, named."""
    from vitexport.core import errors

    cls = getattr(errors, kind, None)
    if isinstance(cls, type) and issubclass(cls, VitexportError):
        return cls(message)
    return RuntimeError(f"the Ray driver process raised {kind}: {message}")


# ---------------------------------------------------------------------------- the child's side

def serve(conn: Connection, address: str, device: str, node_wait: float) -> bool:
    """Answer the run's calls until it closes the channel; whether the cluster's head was lost."""
    from vitexport.matrix.ray_pool import RayPool

    pool = None

    def say(line: str) -> None:
        conn.send(("say", line))

    try:
        while True:
            method, args = conn.recv()
            try:
                if method == "start":
                    pool, value = RayPool(address, device, node_wait, say), None
                else:
                    value = getattr(pool, method)(*args)
            except Exception as e:  # every failure is the run's to report, in its words
                conn.send(("raise", type(e).__name__, str(e)))
                continue
            conn.send(("ok", value))
    except (EOFError, OSError):  # the run closed the channel, or is gone
        return bool(pool and pool.watch.head_lost)


def main() -> int:
    from vitexport.matrix.worker import die_with_parent

    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the process group: the run decides
    fd, address, device, node_wait = sys.argv[1:5]
    head_lost = serve(Connection(int(fd)), address, device, float(node_wait))
    sys.stdout.flush()
    sys.stderr.flush()
    if head_lost:  # leaving a lost head waits on it; the run is over
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
