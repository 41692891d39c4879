"""What Redis's refusals mean on the way to running RMQ's code, for every executor.

A script call goes down one ladder (``storage/scripts.py`` says why both forms exist):

1. ``FCALL`` of RMQ's library;
2. no such function (first use on this server, a restart that kept nothing, a
   ``FUNCTION FLUSH``): ``FUNCTION LOAD`` the library, then ``FCALL`` again;
3. the user may not call or load functions, or Redis out of memory refuses the load: the
   plain scripts (``EVALSHA``, then ``EVAL`` where the server lacks the script);
4. the user may not run plain scripts either (a tenant, docs/reliability.md "Security",
   whose library an administrator loads): :func:`no_code_runs`, a clear
   :class:`~rmq.errors.AccessDenied`, and the next call starts again at 1, since the
   administrator may have loaded the library meanwhile.
"""

from __future__ import annotations

import re
from typing import Any

from redis.exceptions import NoPermissionError, NoScriptError, OutOfMemoryError, ResponseError

from ..errors import AccessDenied
from ..storage.calls import Call

__all__ = ["is_code_missing", "functions_refused", "load_refused", "loaded_anyway",
           "scripts_refused", "no_code_runs", "not_run"]


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


def load_refused(error: BaseException) -> bool:
    """Whether a ``FUNCTION LOAD`` failed for good reasons to run the plain scripts instead:
    the ACL refuses it, or Redis is out of memory (it refuses every load then, where the
    plain scripts that only move messages, ``allow-oom``, still run: consumers drain a full
    Redis even when their library is missing from it)."""
    return functions_refused(error) or isinstance(error, OutOfMemoryError) or str(
        error).startswith("OOM")


def loaded_anyway(error: ResponseError) -> bool:
    """After ``FUNCTION LOAD`` failed with ``error``: True when the library is there all the
    same (another client loaded it meanwhile), False when the load is refused
    (:func:`load_refused`: the plain scripts serve); any other error is raised."""
    if load_refused(error):
        return False
    if "already exists" in str(error):
        return True
    raise error


def scripts_refused(error: BaseException) -> bool:
    """Whether the ACL refuses this user plain scripts (``EVALSHA``, ``EVAL``)."""
    return _refusal(error) and bool(_NAMES_SCRIPTS.search(str(error).lower()))


def no_code_runs(call: Call, error: BaseException) -> AccessDenied:
    """The error of a call that Redis runs in no form for this user: functions were refused
    or missing (step 3 above), and ``error`` refused the plain scripts."""
    assert call.script is not None
    return AccessDenied(
        f"Redis runs none of RMQ's code for this user: RMQ's library "
        f"{call.script.library.name} is not loaded on this server or this user may not call "
        "it (FCALL), and this user may neither load it (FUNCTION LOAD) nor run RMQ's scripts "
        "(EVALSHA). Have a user allowed FUNCTION LOAD load it (any RMQ command of theirs that "
        "runs a script loads it on the servers it reaches, such as `rmq stats TOPIC`; see "
        f"docs/reliability.md, \"Security\"). Redis said: {error}")


def not_run(results: list[Any]) -> list[int]:
    """Indexes of a pipeline's calls that did not run because the server lacked their code
    or refused this user functions or scripts (sent again, one by one, down the ladder);
    any other error is raised."""
    missing = []
    for i, result in enumerate(results):
        if is_code_missing(result) or (isinstance(result, Exception) and (
                functions_refused(result) or scripts_refused(result))):
            missing.append(i)
        elif isinstance(result, Exception):
            raise result
    return missing
