"""Executing batches of :class:`~rmq.storage.calls.Call` on a single node, for both clients.

Each executor only sends: the script fallback ladder (``ladder.py``) decides what (with a
replicated write's ``WAIT``, ``replication.py``), and a batch's round goes out as one
pipeline (a lone call as its first rung's plain command, which costs redis-py and the
ladder's rounds less). Errors are mapped
to RMQ's (``error_map.py``). A cluster has its own executors (``cluster.py``: one pipeline
per master, all masters at once).
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio as aredis
from redis.exceptions import ResponseError

from ..storage.calls import Call
from .error_map import map_errors
from .ladder import Command, ScriptLadder, run_batch
from .replication import PRIMARY_ONLY, Replication

__all__ = ["Executor", "AsyncExecutor"]


class Executor:
    """Executes batches of calls on a single node's redis-py client, each round of the
    ladder as one pipeline. ``round_trips`` counts them (what a test or a benchmark reads
    to see what an operation costs)."""

    def __init__(self, client: redis.Redis, replication: Replication = PRIMARY_ONLY):
        self.client = client
        self.ladder = ScriptLadder()
        self.replication = replication
        self.round_trips = 0

    def __call__(self, calls: list[Call]) -> list[Any]:
        with map_errors():
            if len(calls) == 1 and not self.replication.active:
                # A lone call (most are) goes out as the one command of its first rung; the
                # ladder's rounds take over only when that answers with an error (a library
                # to load, a script to send whole, ...), from that answer.
                self.round_trips += 1
                try:
                    return [self.client.execute_command(*self.ladder.first_command(calls[0]))]
                except ResponseError as error:
                    answered: list[Any] = [error]
                rounds = run_batch(self.ladder, calls, self.replication)
                next(rounds)  # that first round, answered
            else:
                rounds = run_batch(self.ladder, calls, self.replication)
                answered = self._send(next(rounds))
            try:
                while True:
                    answered = self._send(rounds.send(answered))
            except StopIteration as done:
                replies: list[Any] = done.value
                return replies

    def _send(self, commands: list[Command]) -> list[Any]:
        self.round_trips += 1
        if len(commands) == 1:
            try:
                return [self.client.execute_command(*commands[0])]
            except ResponseError as error:
                return [error]
        pipe = self.client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        replies: list[Any] = pipe.execute(raise_on_error=False)
        return replies


class AsyncExecutor:
    """:class:`Executor` on a single node's ``redis.asyncio`` client."""

    def __init__(self, client: aredis.Redis, replication: Replication = PRIMARY_ONLY):
        self.client = client
        self.ladder = ScriptLadder()
        self.replication = replication
        self.round_trips = 0

    async def __call__(self, calls: list[Call]) -> list[Any]:
        with map_errors():
            if len(calls) == 1 and not self.replication.active:
                # a lone call: as Executor's
                self.round_trips += 1
                try:
                    return [await self.client.execute_command(
                        *self.ladder.first_command(calls[0]))]
                except ResponseError as error:
                    answered: list[Any] = [error]
                rounds = run_batch(self.ladder, calls, self.replication)
                next(rounds)
            else:
                rounds = run_batch(self.ladder, calls, self.replication)
                answered = await self._send(next(rounds))
            try:
                while True:
                    answered = await self._send(rounds.send(answered))
            except StopIteration as done:
                replies: list[Any] = done.value
                return replies

    async def _send(self, commands: list[Command]) -> list[Any]:
        self.round_trips += 1
        if len(commands) == 1:
            try:
                return [await self.client.execute_command(*commands[0])]
            except ResponseError as error:
                return [error]
        pipe = self.client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        replies: list[Any] = await pipe.execute(raise_on_error=False)
        return replies
