"""OpenVINO's converter and NNCF report each use to Google Analytics unless the user has opted out
(`opt_in_out --opt_out`) or a CI variable is set. Each report forks the whole process (a conversion
sends several) and waits up to 3 s for the fork to reach the network: a converting process several
gigabytes large is copied again and again, and a user's model conversion is reported from their
machine without their asking.

vitexport reports nothing, and declines for the libraries it calls where the user has not chosen:
their telemetry library's own consent check answers "declined" where it finds no choice on the machine.
An explicit opt-in (the consent file saying 1) stands.
"""

from __future__ import annotations


def import_openvino():
    """openvino, imported once its telemetry declines: the import alone starts the converter's, which
    writes a client id and a usage count under ~/intel. MissingLibrary where it is not installed."""
    from vitexport.core.errors import import_optional

    decline_unless_opted_in()
    return import_optional("openvino", "OpenVINO's export, runtime and GEMM rates", "openvino")


def decline_unless_opted_in() -> None:
    """Make OpenVINO's telemetry decline in this process, where the user has not opted in; idempotent."""
    try:
        from openvino_telemetry import Telemetry
        from openvino_telemetry.utils.opt_in_checker import ConsentCheckResult, OptInChecker
    except ImportError:  # not installed: nothing is reported
        return
    if not getattr(OptInChecker.check, "vitexport_declines", False):
        original = OptInChecker.check

        def check(self, *args, **kwargs):
            answer = original(self, *args, **kwargs)
            return ConsentCheckResult.DECLINED if answer == ConsentCheckResult.NO_FILE else answer

        check.vitexport_declines = True
        OptInChecker.check = check
    # A library imported earlier (NNCF makes its instance on import) has decided already: decide again.
    try:
        existing = Telemetry()  # the one instance, if any; without one this raises
    except Exception:
        return
    existing.consent = OptInChecker().check(False, True) == ConsentCheckResult.ACCEPTED
