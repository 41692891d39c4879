"""What Redis's replies mean on the way to running RMQ's code: the tests the fallback
ladder (``ladder.py``) decides by, and the error of a call that no form of RMQ's code
serves (a tenant whose library an administrator loads, docs/reliability.md "Security").
"""

from __future__ import annotations

import re
from typing import Any

from redis.exceptions import NoPermissionError, NoScriptError, ResponseError

from ..errors import AccessDenied
from ..storage.calls import Call

__all__ = ["is_code_missing", "functions_refused", "scripts_refused", "no_code_runs"]


def is_code_missing(result: Any) -> bool:
    """Whether a call's reply says the server lacks its code: ``NOSCRIPT``, or no such
    function (first use on this server, a restart that kept nothing, a ``FUNCTION FLUSH``)."""
    return isinstance(result, NoScriptError) or (
        isinstance(result, ResponseError) and str(result).startswith("Function not found"))


# The command a refusal names, quoted ('fcall' on Redis 7, `fcall` before): a refusal inside a
# function or a script names its code as "@user_function" or "@user_script", which these do
# not match.
_NAMES_FUNCTIONS = re.compile(r"['`](fcall|function)")
_NAMES_SCRIPTS = re.compile(r"['`](evalsha|eval)['`]")


def _refusal(error: BaseException) -> bool:
    return "noperm" in str(error).lower() or isinstance(error, NoPermissionError)


def functions_refused(error: BaseException) -> bool:
    """Whether Redis will not let this user call or load functions (an ACL without
    ``FCALL`` or ``FUNCTION LOAD``, or a server without functions): the scripts serve."""
    text = str(error).lower()
    return (_refusal(error) or "unknown command" in text) and bool(_NAMES_FUNCTIONS.search(text))


def scripts_refused(error: BaseException) -> bool:
    """Whether the ACL refuses this user plain scripts (``EVALSHA``, ``EVAL``)."""
    return _refusal(error) and bool(_NAMES_SCRIPTS.search(str(error).lower()))


def no_code_runs(call: Call, error: BaseException) -> AccessDenied:
    """The error of a call that Redis runs in no form for this user: functions were refused
    or missing (``ladder.py``, rung 3), and ``error`` refused the plain scripts."""
    assert call.script is not None
    return AccessDenied(
        f"Redis runs none of RMQ's code for this user: RMQ's library "
        f"{call.script.library.name} is not loaded on this server or this user may not call "
        "it (FCALL), and this user may neither load it (FUNCTION LOAD) nor run RMQ's scripts "
        "(EVALSHA). Have a user allowed FUNCTION LOAD load it (any RMQ command of theirs that "
        "runs a script loads it on the servers it reaches, such as `rmq stats TOPIC`; see "
        f"docs/reliability.md, \"Security\"). Redis said: {error}")
