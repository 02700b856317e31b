"""Termination signals end a run the way Ctrl-C does. CI cancellations, `timeout`, `docker stop` and
closed terminals send SIGTERM or SIGHUP rather than SIGINT; each becomes an exception raised in the
main thread, so every `finally` and context manager runs (staging folders are removed, worker
processes are killed) and the CLI exits with the conventional 128 + signal number.

Only the first signal raises: later ones, while that cleanup runs, are ignored so it can finish.

Native code that calls back into Python (OpenVINO's PyTorch frontend asks a Python decoder about
every node) must not have an exception raised inside a callback: the library turns it into an error
of its own, or catches it, and the interruption is lost or the process aborts. Around such a call
(`held`) a signal is only noted, and raised once the call returns."""

from __future__ import annotations

import contextlib
import signal

# Every signal whose default action ends the process and that a process may catch; SIGPIPE stays as
# Python sets it (ignored, so a closed pipe is a BrokenPipeError).
NAMES = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGXCPU", "SIGXFSZ")


class Terminated(BaseException):
    """Raised by a termination signal other than SIGINT (which raises KeyboardInterrupt). A
    BaseException, like KeyboardInterrupt, so `except Exception` in a library does not swallow it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


_active = 0  # how many signals_raise blocks are open
_received = False  # whether a signal has raised since


def by_signal() -> bool:
    """Whether a KeyboardInterrupt now is a real Ctrl-C: one has been signalled, or nothing here turns
    signals into exceptions (a notebook or script using the API), so none can be told from code's own.
    With SIGINT ignored (a background job of a script, nohup) no Ctrl-C can come: every
    KeyboardInterrupt is the code's own."""
    if _received:
        return True
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return False
    return not _active


def caught() -> list[signal.Signals]:
    return [getattr(signal, name) for name in NAMES if hasattr(signal, name)]


def _raise(signum: int, frame) -> None:
    global _received
    _received = True
    for sig in caught():  # one interruption per run: let its cleanup finish
        signal.signal(sig, signal.SIG_IGN)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


@contextlib.contextmanager
def signals_raise():
    """Within this block, termination signals raise in the main thread (see the module's note)."""
    global _active, _received
    previous = {}
    for sig in caught():
        try:
            if signal.getsignal(sig) is signal.SIG_IGN:  # ignored on purpose (nohup, a background job): stays so
                continue
            previous[sig] = signal.signal(sig, _raise)
        except (OSError, ValueError):  # not the main thread, or not catchable here
            pass
    counted = signal.SIGINT in previous  # only then is a Ctrl-C known when it comes
    if counted:
        _active += 1
        if _active == 1:  # a new run: no signal yet
            _received = False
    try:
        yield
    finally:
        _active -= counted
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


@contextlib.contextmanager
def held(what: str = "this step"):
    """Within this block a termination signal is noted, not raised, and raised as the block ends (see
    the module's note): the work stops when the native call returns. A second one raises at once."""
    import sys
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach the main thread only; there is nothing to hold here
        return
    noted: list[int] = []
    previous = {}

    def note(signum: int, frame) -> None:
        if noted:  # asked twice: stop now, as if nothing were held
            _restore(previous)
            signal.raise_signal(signum)
            return
        noted.append(signum)
        try:  # a closed terminal (SIGHUP) has no stderr: nothing may be raised in here
            print(f"stopping after {what} (again to stop at once)", file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass

    for sig in caught():
        try:
            if signal.getsignal(sig) not in (signal.SIG_IGN, None):
                previous[sig] = signal.signal(sig, note)
        except (OSError, ValueError):
            pass
    try:
        yield
    finally:
        _restore(previous)
        if noted:
            signal.raise_signal(noted[0])  # delivered to the handler restored above: it raises here


def _restore(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)
    previous.clear()


def exit_code(error: BaseException) -> int:
    """128 + N for a signal's exception (130 for Ctrl-C)."""
    return error.exit_code if isinstance(error, Terminated) else 128 + signal.SIGINT


def signal_in(error: BaseException) -> BaseException | None:
    """The KeyboardInterrupt or Terminated that `error` is, or came from: a signal's exception raised
    while a C extension runs (Ray's wait, say) comes back out of it as a SystemError caused by it."""
    seen: BaseException | None = error
    for _ in range(16):  # a chain, not a cycle
        if seen is None:
            return None
        if isinstance(seen, (KeyboardInterrupt, Terminated)):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
