"""Joining a Ray cluster that requires a token (Ray's token authentication, `RAY_AUTH_MODE=token`).

The token comes from where Ray itself reads it, in Ray's order: the `RAY_AUTH_TOKEN` environment
variable, else the file `RAY_AUTH_TOKEN_PATH` names, else `~/.ray/auth_token`; Ray sends it only when
`RAY_AUTH_MODE=token` is set (for an explicit address it never turns token mode on by itself, so a
local token is not handed to whatever address is named). vitexport follows that rule and reads
nothing else.

Before `ray.init`, the head is asked for its cluster id as `ray.init` would: a refused token is then
said as such at once, with how to give the right one, instead of Ray's "Failed to connect" after
twenty seconds of retries. A token mode with no token at all is said before Ray is asked (Ray's C++
token loader aborts the process on it).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from vitexport.core.errors import BackendUnavailable

ASK_TIMEOUT_S = 10  # a port that answers TCP but is no Ray head keeps Ray's client waiting for 40 s
DEFAULT_TOKEN = "~/.ray/auth_token"
HOW = ("give the cluster's token (`ray get-auth-token` on its head prints it) in RAY_AUTH_TOKEN, or in a file "
       "named by RAY_AUTH_TOKEN_PATH or at ~/.ray/auth_token, with RAY_AUTH_MODE=token")


def token_mode() -> bool:
    return os.environ.get("RAY_AUTH_MODE", "").strip().lower() == "token"


def token_source() -> str | None:
    """Where Ray would read a token from here, in words, or None when there is none."""
    if os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return "RAY_AUTH_TOKEN"
    named = os.environ.get("RAY_AUTH_TOKEN_PATH", "").strip()
    if named:
        return f"{named} (RAY_AUTH_TOKEN_PATH)" if _has_text(Path(named).expanduser()) else None
    default = Path(DEFAULT_TOKEN).expanduser()
    return str(default) if _has_text(default) else None


def check_token_given(address: str) -> None:
    """With RAY_AUTH_MODE=token, a token must be there to send."""
    if not token_mode() or token_source() is not None:
        return
    named = os.environ.get("RAY_AUTH_TOKEN_PATH", "").strip()
    where = f"RAY_AUTH_TOKEN_PATH names {named}, which holds no token" if named else \
        f"neither RAY_AUTH_TOKEN nor {DEFAULT_TOKEN} holds one"
    raise BackendUnavailable(f"cannot join the Ray cluster at {address}: RAY_AUTH_MODE=token, but no token was found "
                             f"({where}); {HOW}")


def check_authenticated(address: str, gcs_address: str) -> None:
    """Ask the head at `gcs_address` for its cluster id; refuse in one line when it refuses our
    authentication. Any other trouble is left to ray.init to say, except a port that does not answer
    as a Ray head within ASK_TIMEOUT_S."""
    try:
        from ray._raylet import GcsClient  # Ray's own client: it sends the token as ray.init does
        from ray.exceptions import AuthenticationError
    except ImportError:  # another Ray: ray.init alone decides
        return
    outcome: dict[str, BaseException | None] = {}

    def ask() -> None:
        try:
            GcsClient(address=gcs_address)
            outcome["error"] = None
        except BaseException as e:  # handed to the caller's thread
            outcome["error"] = e

    asker = threading.Thread(target=ask, name="vitexport-ray-auth", daemon=True)
    asker.start()
    asker.join(ASK_TIMEOUT_S)
    if "error" not in outcome:
        raise BackendUnavailable(f"cannot reach the Ray cluster at {address}: something answers there, but not as a "
                                 f"Ray head within {ASK_TIMEOUT_S} s (`ray start --head` prints the head's address)")
    if isinstance(outcome["error"], AuthenticationError):
        raise BackendUnavailable(refused(address)) from None


def refused(address: str) -> str:
    """The line for a cluster that refused this machine's authentication."""
    source = token_source()
    if token_mode():
        return f"the Ray cluster at {address} refused the token from {source}: authentication failed; {HOW}"
    if source:
        return (f"the Ray cluster at {address} requires a token (authentication failed: none was sent): Ray sends "
                f"the one in {source} only with RAY_AUTH_MODE=token (if it is not the cluster's, `ray get-auth-token` "
                "on its head prints it)")
    return f"the Ray cluster at {address} requires a token (authentication failed: none was sent); {HOW}"


def _has_text(path: Path) -> bool:
    try:
        return bool(path.read_text().strip())
    except (OSError, UnicodeDecodeError):
        return False
