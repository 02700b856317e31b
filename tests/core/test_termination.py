"""A termination signal's exception is found where a C extension hid it: raised while Ray's wait ran,
it comes back out as a SystemError caused by it, and must still end the run as that signal."""

import signal

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
