"""A termination signal's exception is found where a C extension hid it: raised while Ray's wait ran,
it comes back out as a SystemError caused by it, and must still end the run as that signal. A
KeyboardInterrupt is taken for a Ctrl-C only where one can come."""

import signal
import subprocess
import sys

from vitexport.core.termination import Terminated, signal_in


def raised_through_an_extension(error: BaseException) -> SystemError:
    try:
        try:
            raise error
        except BaseException as inner:
            raise SystemError("<cyfunction CoreWorker.wait> returned a result with an exception set") from inner
    except SystemError as outer:
        return outer


def test_a_signal_behind_a_system_error_is_found():
    term = Terminated(signal.SIGTERM)
    assert signal_in(raised_through_an_extension(term)) is term
    ctrl_c = KeyboardInterrupt()
    assert signal_in(raised_through_an_extension(ctrl_c)) is ctrl_c
    assert signal_in(term) is term


def test_other_errors_are_not_signals():
    assert signal_in(raised_through_an_extension(ValueError("no"))) is None
    assert signal_in(RuntimeError("plain")) is None


def test_with_sigint_ignored_a_keyboard_interrupt_is_the_codes_own():
    """Started with SIGINT ignored (a script's background job, nohup), no Ctrl-C can come; with it
    caught, only a signalled one counts, and still does once the handler ignores the next while
    cleanup runs; with nothing caught (the API in a script), none can be told apart. In a fresh
    interpreter whose SIGINT is the default: the suite itself may have been started with it ignored."""
    code = """
import signal
from vitexport.core.termination import by_signal, signals_raise
seen = [by_signal()]
with signals_raise():
    seen.append(by_signal())
signal.signal(signal.SIGINT, signal.SIG_IGN)
seen.append(by_signal())
with signals_raise():
    seen.append(by_signal())
signal.signal(signal.SIGINT, signal.default_int_handler)
with signals_raise():
    try:
        signal.raise_signal(signal.SIGINT)
    except KeyboardInterrupt:
        seen.append(by_signal())
print(seen)
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["[True,", "False,", "False,", "False,", "True]"]


def fresh(code: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter whose SIGINT is the default (the suite may run with it ignored)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_a_signal_during_held_native_work_is_raised_when_it_returns():
    """Inside `held` a Ctrl-C (or SIGTERM, under signals_raise) is noted and raised as the block ends,
    so a native call that calls back into Python never has it raised inside; a second one raises at
    once; a signal ignored on purpose stays ignored."""
    code = """
import signal
from vitexport.core.termination import Terminated, held, signals_raise
seen = []
try:
    with held("the step"):
        signal.raise_signal(signal.SIGINT)
        seen.append("went on")
except KeyboardInterrupt:
    seen.append("interrupted after")
try:
    with held():
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)
        seen.append("not reached")
except KeyboardInterrupt:
    seen.append("twice: at once")
with signals_raise():
    try:
        with held():
            signal.raise_signal(signal.SIGTERM)
            seen.append("went on")
    except Terminated as e:
        seen.append(e.args[0])
signal.signal(signal.SIGINT, signal.SIG_IGN)
with held():
    signal.raise_signal(signal.SIGINT)
seen.append(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)
print(seen)
"""
    run = fresh(code)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "['went on', 'interrupted after', 'twice: at once', 'went on', 'SIGTERM', True]"
    assert "stopping after the step" in run.stderr
