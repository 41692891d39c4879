"""The unit of work the operations hand to a connection: a Redis command or a script call.

An operation is a generator: it yields a list of :class:`Call` (one round trip's worth,
pipelined where the deployment allows), receives their results in order, and finally returns
its value. The clients run them (``rmq.client``: each performs a batch as one round trip,
awaited or not), which keeps one implementation of every operation for both clients, and
lets tests of pure logic feed an operation its replies without Redis.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from .scripts import Script

__all__ = ["Call", "Op", "together", "command", "script_call", "routing_key"]

T = TypeVar("T")


@dataclass(slots=True)  # not frozen: one is built per single send, a frozen one in 4x the time
class Call:
    """A plain command (``script`` None, ``args`` the command) or a script call. Never
    changed once built."""

    args: tuple[Any, ...]
    script: Script | None = None
    keys: tuple[str, ...] = ()
    # A single send's enqueue.lua call: concurrent ones may travel joined as one call
    # (send.join; the client's group commit, client/group_commit.py).
    joins: bool = False


Op = Generator[list[Call], list[Any], T]

# The plain commands the operations send that name no key: any node of a cluster serves
# them (a PUBLISH reaches the subscribers of every node).
_KEYLESS = frozenset({"TIME", "PUBLISH"})


def routing_key(call: Call) -> str | bytes | None:
    """The key whose slot decides which node of a Redis Cluster runs ``call``: a script's
    first key, a command's first argument (every keyed command the operations send names
    one key, or keys of one slot); None when any node will do."""
    if call.script is not None:
        return call.keys[0] if call.keys else None
    if call.args[0] in _KEYLESS or len(call.args) < 2:
        return None
    key: str | bytes = call.args[1]
    return key


def command(*args: Any) -> Call:
    return Call(args)


def script_call(script: Script, keys: Sequence[str], args: Sequence[Any]) -> Call:
    return Call(tuple(args), script, tuple(keys))


def together(ops: list[Op[Any]]) -> Op[list[Any]]:
    """Several operations as one: each round trip carries the next batch of every one still
    running. Returns their values in order."""
    if len(ops) == 1:  # a lone single send's group commit: nothing to interleave
        return [(yield from ops[0])]
    values: list[Any] = [None] * len(ops)
    pending: dict[int, list[Call]] = {}
    for i, op in enumerate(ops):
        try:
            pending[i] = next(op)
        except StopIteration as done:
            values[i] = done.value
    while pending:
        results = yield [call for batch in pending.values() for call in batch]
        following: dict[int, list[Call]] = {}
        at = 0
        for i, batch in pending.items():
            try:
                following[i] = ops[i].send(results[at : at + len(batch)])
            except StopIteration as done:
                values[i] = done.value
            at += len(batch)
        pending = following
    return values
