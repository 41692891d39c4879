"""Executing batches of calls on a Redis Cluster, for both clients.

Each call goes to the master that serves its slot, the calls for one master travel as one
pipeline on that master's own connection, and every master's pipeline is sent before any
reply is read (``Client``) or all are awaited together (``AsyncClient``). A batch costs one
round trip per master it touches, the masters in parallel, where calling them one by one
cost a round trip per call. redis-py's ``ClusterPipeline`` is not used: redis-py 8.1 refuses
``evalsha`` in it outright, and it costs about 135 µs per command.

The cluster's answers are handled per call (:class:`ClusterBatch`, the logic without I/O):

- ``MOVED`` (the slot has a new owner): refresh the slot map, send the call to the owner;
- ``ASK`` (the slot is migrating): send the call to the node named, after ``ASKING``;
- a script call climbs the one fallback ladder (``ladder.py``: ``FCALL``, ``FUNCTION LOAD``
  on the node that lacks the library, ``EVALSHA``/``EVAL`` once functions are refused); if
  the ACL refuses the scripts too, the call's answer is ``fallback.no_code_runs`` and the
  next batch tries ``FCALL`` again;
- a lost connection, ``TRYAGAIN``, ``CLUSTERDOWN``, an uncovered slot (a failover under
  way): the calls still unanswered are tried again under the one reconnect policy
  (``retry.retry_policy``: its backoff, the slot map refreshed before each try), then
  :class:`~rmq.errors.RedisUnavailable`.

A call whose node failed mid-pipeline may have run before the connection broke, and is sent
again, as after a lost reply on a single node: every script is safe to run twice (a send
merges, an ack or a nack of a settled delivery does nothing, a lost claim's leases expire).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import redis
import redis.asyncio as aredis
from redis.asyncio.cluster import PipelineCommand
from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    RedisError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..storage.calls import Call, routing_key
from .error_map import map_errors
from .ladder import Command, ScriptLadder
from .replication import PRIMARY_ONLY, BatchNotReplicated, Replication
from .retry import async_retry_policy, retry_policy

__all__ = ["ClusterBatch", "ClusterExecutor", "AsyncClusterExecutor"]

_UNANSWERED = object()
_WAIT = -1  # the index of a node's WAIT (replication.py) in a round
# Redirections (MOVED, ASK, a missing function or script) one try follows before it counts as
# a failed try: a slot map that keeps moving is a cluster being resharded, worth a backoff.
_REDIRECTS = 8
# What a cluster answers while it is not serving a slot (a failover or a migration under
# way): worth retrying after a backoff, as a lost connection is.
_CLUSTER_FAULTS = (TryAgainError, ClusterDownError, SlotNotCoveredError)
_LOST = (RedisConnectionError, RedisTimeoutError, ConnectionError, OSError)


@lru_cache(maxsize=65536)
def _slot(key: str | bytes) -> int:
    return key_slot(key.encode() if isinstance(key, str) else key)


# One node's share of a round: the node, the calls it runs (None for an ASKING before one),
# the commands to send.
_NodeRound = tuple[Any, list[int | None], list[Command]]


class ClusterBatch:
    """One batch on a cluster, without I/O: which calls are still unanswered, where each
    goes next, and what the cluster's answers mean (module doc)."""

    def __init__(self, calls: list[Call], ladder: ScriptLadder | None = None,
                 replication: Replication = PRIMARY_ONLY):
        self.calls = calls
        self.replication = replication
        self.unreplicated: list[BaseException] = []  # what each node's WAIT found short
        self.results: list[Any] = [_UNANSWERED] * len(calls)
        self.todo = list(range(len(calls)))
        self.asking: dict[int, str] = {}  # call -> the node an ASK named
        self.ladder = ScriptLadder() if ladder is None else ladder
        self.rungs = [self.ladder.start(call) for call in calls]  # how each call is sent
        self.stale_map = False  # a MOVED or a fault: refresh the slot map before the next round
        self.fault: BaseException | None = None  # this round failed somewhere: back off

    def plan(self, node_of_slot: Callable[[int], Any], node_named: Callable[[str], Any],
             any_node: Callable[[], Any]) -> list[_NodeRound]:
        """The next round: per node (redis-py's ``ClusterNode``), the calls it runs (None for
        an ``ASKING`` before one) and the commands to send, in batch order."""
        rounds: dict[int, _NodeRound] = {}
        for i in self.todo:
            node = node_named(self.asking[i]) if i in self.asking else None
            if node is None:  # no ASK, or one naming a node the map does not know yet
                self.asking.pop(i, None)
                key = routing_key(self.calls[i])
                try:
                    node = any_node() if key is None else node_of_slot(_slot(key))
                except (SlotNotCoveredError, KeyError) as error:  # a failover under way
                    self.stale_map = True
                    raise RedisConnectionError(
                        f"Redis Cluster serves no node for a slot: {error}") from error
            _, indexes, commands = rounds.setdefault(id(node), (node, [], []))
            sent = self.ladder.commands(self.calls[i], self.rungs[i])
            if i in self.asking:  # ASKING right before the command it is for
                sent.insert(-1, ("ASKING",))
            indexes += [None] * (len(sent) - 1)  # their replies are not read
            indexes.append(i)
            commands += sent
        for _, indexes, commands in rounds.values():  # each master waits for its replicas
            for wait in self.replication.waits(self._of(indexes)):
                indexes.append(_WAIT)
                commands.append(wait.args)
        self.fault = None
        return list(rounds.values())

    def _of(self, indexes: list[int | None]) -> list[Call]:
        return [self.calls[i] for i in indexes if i is not None and i != _WAIT]

    def settle(self, indexes: list[int | None], replies: list[Any],
               lost: BaseException | None = None) -> None:
        """Take one node's replies, in order; ``lost``: the error that cut them short."""
        for i, reply in zip(indexes, replies, strict=False):
            if i is not None and i != _WAIT:
                self._answer(i, reply)
        if _WAIT in indexes:  # the writes this node answered, and what its WAIT said of them
            answered = [self.calls[i] for i in indexes[:len(replies)] if i is not None
                        and i != _WAIT and self.results[i] is not _UNANSWERED]
            waited = replies[indexes.index(_WAIT):]
            error = self.replication.shortfall(answered, waited) if answered else None
            if error is not None:
                self.unreplicated.append(error)
        if lost is not None:
            self.fault = lost
            self.stale_map = True

    def _answer(self, i: int, reply: Any) -> None:
        if not isinstance(reply, Exception):
            self.results[i] = reply
            return
        self.asking.pop(i, None)
        rung = self.ladder.climb(self.rungs[i], reply)
        if rung is not None:  # not run: sent again on the next rung
            self.rungs[i] = rung
        elif isinstance(reply, MovedError):  # before AskError, of which redis-py makes it a kind
            self.stale_map = True
        elif isinstance(reply, AskError):
            self.asking[i] = f"{reply.host}:{reply.port}"
        elif isinstance(reply, _CLUSTER_FAULTS):
            self.fault = RedisConnectionError(f"Redis Cluster is not serving a slot: {reply}")
            self.stale_map = True
        elif isinstance(reply, _LOST):
            self.fault = reply
            self.stale_map = True
        else:  # an answer: raised when the batch is done
            self.results[i] = self.ladder.answer(self.calls[i], self.rungs[i], reply)

    def next_round(self) -> bool:
        """Forget the answered calls; whether any call is left for another round. Raises
        this round's fault, if any, for the retry policy to back off and try again."""
        self.todo = [i for i in self.todo if self.results[i] is _UNANSWERED]
        if self.fault is not None and self.todo:
            raise self.fault
        return bool(self.todo)

    def values(self) -> list[Any]:
        """The replies in batch order; the first error among them is raised (as a pipeline
        on a single node does)."""
        for result in self.results:
            if isinstance(result, Exception):
                raise result
        if self.unreplicated:
            error = self.unreplicated[0]
            if isinstance(error, BatchNotReplicated):
                error.replies = self.results  # replication.py: the operation goes on
            raise error
        return self.results


async def _nothing(_: BaseException) -> None:
    """The retry policy's failure callback: every fault marks the batch's slot map stale,
    so the next try refreshes it first."""


def _redirections_exceeded(batch: ClusterBatch) -> RedisConnectionError:
    return RedisConnectionError(
        f"Redis Cluster kept redirecting {len(batch.todo)} call(s) after {_REDIRECTS} "
        "rounds (slots moving)")


class ClusterExecutor:
    """Executes batches of :class:`Call` on a ``redis.RedisCluster`` (module doc).

    ``round_trips`` counts rounds (every node's pipeline sent, then every reply read) and
    ``pipelines`` the node pipelines among them: what a test or a benchmark reads to see
    what a batch cost."""

    def __init__(self, client: redis.RedisCluster, replication: Replication = PRIMARY_ONLY):
        self.client = client
        self.replication = replication
        retry = getattr(client, "retry", None)
        self.retry = retry if isinstance(retry, redis.retry.Retry) else retry_policy()
        self.round_trips = 0
        self.pipelines = 0
        self.ladder = ScriptLadder()

    def __call__(self, calls: list[Call]) -> list[Any]:
        batch = ClusterBatch(calls, self.ladder, self.replication)
        with map_errors():
            # every fault marks the slot map stale: the next try refreshes it first
            self.retry.call_with_retry(lambda: self._try(batch), lambda _: None)
            return batch.values()

    def _try(self, batch: ClusterBatch) -> None:
        nodes = self.client.nodes_manager
        for _ in range(_REDIRECTS):
            if batch.stale_map:
                self._refresh()
                batch.stale_map = False
            plan = batch.plan(nodes.get_node_from_slot,
                              lambda name: self.client.get_node(node_name=name),
                              self.client.get_default_node)
            self.round_trips += 1
            self.pipelines += len(plan)
            self._round(batch, plan)
            if not batch.next_round():
                return
        raise _redirections_exceeded(batch)

    def _round(self, batch: ClusterBatch, plan: list[_NodeRound]) -> None:
        """Write every node's pipeline, then read every node's replies into ``batch``."""
        sent = []
        unread: list[tuple[redis.Redis, Any]] = []  # written to, replies not read yet
        try:
            for node, _, commands in plan:
                server = self.client.get_redis_connection(node)
                connection, lost = self._send(server, commands)
                sent.append((server, connection, lost))
                if connection is not None:
                    unread.append((server, connection))
            for (_, indexes, commands), (server, connection, lost) in zip(plan, sent,
                                                                          strict=True):
                if connection is not None:
                    unread.remove((server, connection))
                replies, lost = self._read(server, connection, commands, lost)
                batch.settle(indexes, replies, lost)
        except BaseException:
            for server, connection in unread:  # their replies would confuse the next user
                connection.disconnect()
                server.connection_pool.release(connection)
            raise

    @staticmethod
    def _send(server: redis.Redis, commands: list[Command]
              ) -> tuple[Any, BaseException | None]:
        """Write one node's pipeline; returns its connection, or the error that stopped it."""
        pool = server.connection_pool
        connection = None
        try:
            try:
                connection = pool.get_connection()
            except TypeError:  # redis-py before 5.3 asks for a command name, then ignores it
                connection = pool.get_connection("EVALSHA")
            connection.send_packed_command(connection.pack_commands(commands))
        except _LOST as error:
            if connection is not None:
                connection.disconnect()
                pool.release(connection)
            return None, error
        return connection, None

    @staticmethod
    def _read(server: redis.Redis, connection: Any, commands: list[Command],
              lost: BaseException | None) -> tuple[list[Any], BaseException | None]:
        """Read one node's replies (an error reply in its place); a lost connection ends
        them early and is returned."""
        if connection is None:
            return [], lost
        replies: list[Any] = []
        try:
            for command in commands:
                try:
                    replies.append(server.parse_response(connection, command[0]))
                except ResponseError as error:
                    replies.append(error)
        except BaseException as error:
            connection.disconnect()  # cut mid-pipeline: its unread replies must not be reused
            if not isinstance(error, _LOST):
                raise
            return replies, error
        finally:
            server.connection_pool.release(connection)
        return replies, None

    def _refresh(self) -> None:
        # A refresh that fails (no node reachable) is not raised: the next try fails as well
        # and is retried in its turn.
        with contextlib.suppress(RedisError, OSError):
            self.client.nodes_manager.initialize()


class AsyncClusterExecutor:
    """:class:`ClusterExecutor` on a ``redis.asyncio.RedisCluster``: each node's pipeline is
    one task, all awaited together."""

    def __init__(self, client: aredis.RedisCluster,
                 replication: Replication = PRIMARY_ONLY):
        self.client = client
        self.replication = replication
        retry = getattr(client, "retry", None)
        self.retry = (retry if isinstance(retry, redis.asyncio.retry.Retry)
                      else async_retry_policy())
        self.round_trips = 0
        self.pipelines = 0
        self.ladder = ScriptLadder()

    async def __call__(self, calls: list[Call]) -> list[Any]:
        batch = ClusterBatch(calls, self.ladder, self.replication)
        with map_errors():
            await self.client.initialize()  # reads the slot map on first use, then returns
            await self.retry.call_with_retry(lambda: self._try(batch), _nothing)
            return batch.values()

    async def _try(self, batch: ClusterBatch) -> None:
        nodes = self.client.nodes_manager
        for _ in range(_REDIRECTS):
            if batch.stale_map:
                await self._refresh()
                batch.stale_map = False
            plan = batch.plan(nodes.get_node_from_slot,
                              lambda name: self.client.get_node(node_name=name),
                              self.client.get_default_node)
            self.round_trips += 1
            self.pipelines += len(plan)
            answers = await asyncio.gather(
                *(self._pipeline(node, commands) for node, _, commands in plan))
            for (_, indexes, _), (replies, lost) in zip(plan, answers, strict=True):
                batch.settle(indexes, replies, lost)
            if not batch.next_round():
                return
        raise _redirections_exceeded(batch)

    @staticmethod
    async def _pipeline(node: Any, commands: list[Command]
                        ) -> tuple[list[Any], BaseException | None]:
        pipeline = [PipelineCommand(i, *command) for i, command in enumerate(commands)]
        try:
            await node.execute_pipeline(pipeline)  # a reply that is an error is its result
        except _LOST as error:
            return [], error
        return [command.result for command in pipeline], None

    async def _refresh(self) -> None:
        with contextlib.suppress(RedisError, OSError):  # as ClusterExecutor._refresh
            await self.client.nodes_manager.initialize()
