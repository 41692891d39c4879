"""How a script call reaches Redis, decided once and without I/O: the fallback ladder.

RMQ's scripts form one Functions library (``storage/scripts.py`` says why both forms). A
call climbs these rungs until one answers; each reply decides the next rung:

1. ``FCALL`` of the library's function;
2. no such function (first use on this server, a restart that kept nothing, a ``FUNCTION
   FLUSH``): ``FUNCTION LOAD`` of the library, then the ``FCALL`` again, in one round trip
   (the load's reply is not read: the call after it tells whether the library is there);
3. Redis will not let this user call or load functions (an ACL without ``FCALL`` or
   ``FUNCTION LOAD``, a server without functions, or still no such function after the
   load: refused, or Redis is out of memory and refuses every load, where the scripts that
   only move messages, ``allow-oom``, still run): ``EVALSHA`` of the same script, and from
   then on for every call of this executor;
4. ``NOSCRIPT`` (the server lacks the script): ``EVAL`` of its source, which also caches it;
5. the ACL refuses this user the scripts too (a tenant whose library an administrator loads,
   docs/reliability.md "Security"): the call's answer is :class:`~rmq.errors.AccessDenied`
   naming the library (``fallback.no_code_runs``), and the next call starts again at
   ``FCALL``, since the administrator may have loaded the library meanwhile.

:class:`ScriptLadder` holds the one piece of state (whether functions serve) and answers
"what to send" and "what this reply means"; :func:`run_batch` drives a batch of calls
through it, one round trip per round, as a generator (it yields a round's commands and
receives their replies, an error reply in its place). The single-node executors
(``executor.py``) drive it over one pipeline; the cluster's (``cluster.py``) climb the
same rungs inside :class:`~rmq.client.cluster.ClusterBatch`, per node. Tests feed it replies.
"""

from __future__ import annotations

from collections.abc import Generator
from enum import IntEnum
from typing import Any

from redis.exceptions import NoScriptError

from ..storage.calls import Call
from .fallback import functions_refused, is_code_missing, no_code_runs, scripts_refused
from .replication import PRIMARY_ONLY, BatchNotReplicated, Replication

__all__ = ["Rung", "ScriptLadder", "run_batch", "Rounds", "Command", "is_code_missing",
           "functions_refused"]

Command = tuple[Any, ...]
# One round trip's commands out, their replies in (errors in place); the batch's replies last.
Rounds = Generator[list[Command], list[Any], list[Any]]


class Rung(IntEnum):
    """How a call is sent; a call only ever climbs (so a batch ends within four rounds)."""

    PLAIN = 0  # not a script: the command as it is
    FCALL = 1
    LOAD = 2  # FUNCTION LOAD, then FCALL
    EVALSHA = 3
    EVAL = 4


# The rungs as module globals: the hot path compares them per call, and an enum class's
# attribute costs a lookup through its metaclass each time.
_PLAIN, _FCALL, _LOAD, _EVALSHA, _EVAL = Rung


class ScriptLadder:
    """The ladder's state for one executor: whether functions serve (``functions``), and
    what each rung sends and each reply means (module doc)."""

    def __init__(self, functions: bool = True):
        self.functions = functions

    def start(self, call: Call) -> Rung:
        """The rung a call is first sent on."""
        if call.script is None:
            return _PLAIN
        return _FCALL if self.functions else _EVALSHA

    def first_command(self, call: Call) -> Command:
        """The one command ``call`` is sent as on the rung it starts on (``start``)."""
        script = call.script
        if script is None:
            return call.args
        if self.functions:
            return ("FCALL", script.function, len(call.keys), *call.keys, *call.args)
        return ("EVALSHA", script.sha, len(call.keys), *call.keys, *call.args)

    def commands(self, call: Call, rung: Rung) -> list[Command]:
        """What to send for ``call`` on ``rung``; the last command's reply is the call's."""
        script = call.script
        if script is None:
            return [call.args]
        if rung is _FCALL:
            return [("FCALL", script.function, len(call.keys), *call.keys, *call.args)]
        if rung is _LOAD:
            return [("FUNCTION", "LOAD", script.library.source),
                    ("FCALL", script.function, len(call.keys), *call.keys, *call.args)]
        name, body = ("EVAL", script.source) if rung is _EVAL else ("EVALSHA", script.sha)
        return [(name, body, len(call.keys), *call.keys, *call.args)]

    def climb(self, rung: Rung, reply: Any) -> Rung | None:
        """The rung to send the call on again, or None when ``reply`` is its answer (a
        value, or an error to raise)."""
        if not isinstance(reply, Exception) or rung is _PLAIN:
            return None
        if rung is _EVALSHA:
            return _EVAL if isinstance(reply, NoScriptError) else None
        if rung is _EVAL or not (is_code_missing(reply) or functions_refused(reply)):
            return None
        if rung is _FCALL and self.functions and not functions_refused(reply):
            return _LOAD
        self.functions = False  # refused, or loaded and still missing
        return _EVALSHA

    def answer(self, call: Call, rung: Rung, reply: Exception) -> Exception:
        """The error a call that climbs no further answers with: ``reply``, or rung 5's
        :class:`~rmq.errors.AccessDenied` when the ACL refused the scripts too."""
        if rung >= _EVALSHA and scripts_refused(reply):
            self.functions = True  # the library may be loaded by the next call
            return no_code_runs(call, reply)
        return reply


def run_batch(ladder: ScriptLadder, calls: list[Call],
              replication: Replication = PRIMARY_ONLY) -> Rounds:
    """Run ``calls`` up the ladder on one connection: each round sends every unanswered
    call on its rung, pipelined (the first round is the whole batch). Returns the replies
    in batch order; the first error among them is raised (as a pipeline does).

    A round that stores something ends with ``replication``'s ``WAIT`` (``replication.py``),
    in the same pipeline, so it counts that round's writes on their connection; its reply
    is taken off before the calls' replies are read. Fewer replicas than asked is
    :class:`~rmq.client.replication.BatchNotReplicated` carrying the batch's replies, raised
    once every call is answered (an error among the calls is raised first)."""
    rungs = [ladder.start(call) for call in calls]
    results: list[Any] = [None] * len(calls)
    todo: list[int] | range = range(len(calls))
    failed = False
    short: BaseException | None = None
    while todo:
        sent = [ladder.commands(calls[i], rungs[i]) for i in todo]
        commands = sent[0] if len(sent) == 1 else [c for each in sent for c in each]
        waits = replication.waits([calls[i] for i in todo]) if replication.active else []
        replies = yield commands + [wait.args for wait in waits] if waits else commands
        if waits:
            waited = replies[len(commands):]
            replies = replies[:len(commands)]
            short = short or replication.shortfall([calls[i] for i in todo], waited)
        climbing = []
        at = 0
        for i, each in zip(todo, sent, strict=True):
            at += len(each)
            reply = replies[at - 1]
            if isinstance(reply, Exception):
                rung = ladder.climb(rungs[i], reply)
                if rung is not None:
                    rungs[i] = rung
                    climbing.append(i)
                    continue
                failed = True
                reply = ladder.answer(calls[i], rungs[i], reply)
            results[i] = reply
        todo = climbing
    if failed:
        raise next(result for result in results if isinstance(result, Exception))
    if isinstance(short, BatchNotReplicated):
        short.replies = results  # replication.py: the operation goes on, then raises it
    if short is not None:
        raise short
    return results
