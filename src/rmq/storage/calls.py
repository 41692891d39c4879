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

__all__ = ["Call", "Op", "together", "command", "script_call"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Call:
    """A plain command (``script`` None, ``args`` the command) or a script call."""

    args: tuple[Any, ...]
    script: Script | None = None
    keys: tuple[str, ...] = ()


Op = Generator[list[Call], list[Any], T]


def command(*args: Any) -> Call:
    return Call(args)


def script_call(script: Script, keys: Sequence[str], args: Sequence[Any]) -> Call:
    return Call(tuple(args), script, tuple(keys))


def together(ops: list[Op[Any]]) -> Op[list[Any]]:
    """Several operations as one: each round trip carries the next batch of every one still
    running. Returns their values in order."""
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
