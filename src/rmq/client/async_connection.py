"""The asyncio twin of ``connection.py`` and ``wake.py``, for :class:`rmq.AsyncClient`.

- :func:`drive` runs a sans-IO operation (``storage/calls.py``) by awaiting each batch.
- :class:`AsyncExecutor` pipelines a batch into one round trip on a single node and sends
  one call at a time on a cluster, EVALSHA falling back to EVAL, errors mapped by
  ``connection.map_errors`` exactly as for the sync client.
- :class:`AsyncWaiter` sleeps on a topic's wake channel.
- :func:`open_async` resolves the URL and checks the server with the sync code (once, in a
  thread), then opens a ``redis.asyncio`` client of the same kind.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import redis
import redis.asyncio as aredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..storage.calls import Call, Op
from ..storage.keys import wake_channel
from .connection import RETRY_ATTEMPTS, connect, is_permanent, map_errors, resolve_url
from .connection import _options as connection_options

__all__ = ["AsyncRedis", "drive", "AsyncExecutor", "AsyncWaiter", "open_async"]

AsyncRedis = aredis.Redis | aredis.RedisCluster
_RETRIED: Any = (RedisConnectionError, RedisTimeoutError, ConnectionError)


async def drive(op: Op[Any], execute: Callable[[list[Call]], Awaitable[list[Any]]]) -> Any:
    """Run ``op`` to completion, awaiting ``execute`` for each batch it yields."""
    try:
        batch = next(op)
        while True:
            batch = op.send(await execute(batch) if batch else [])
    except StopIteration as done:
        return done.value


class AsyncExecutor:
    """Executes batches of :class:`Call` on a ``redis.asyncio`` client (node or cluster)."""

    def __init__(self, client: AsyncRedis):
        self.client = client
        self.cluster = isinstance(client, aredis.RedisCluster)

    async def __call__(self, batch: list[Call]) -> list[Any]:
        with map_errors():
            if self.cluster or len(batch) == 1:
                return [await self._one(call) for call in batch]
            return await self._pipelined(batch)

    async def _one(self, call: Call) -> Any:
        if call.script is None:
            return await self.client.execute_command(*call.args)
        try:
            return await self.client.evalsha(call.script.sha, len(call.keys), *call.keys,
                                             *call.args)
        except NoScriptError:
            # First use on this server, or it restarted: EVAL also caches it for next time.
            return await self.client.eval(call.script.source, len(call.keys), *call.keys,
                                          *call.args)

    async def _pipelined(self, batch: list[Call]) -> list[Any]:
        pipe = self.client.pipeline(transaction=False)
        for call in batch:
            if call.script is None:
                pipe.execute_command(*call.args)
            else:
                pipe.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)
        results = await pipe.execute(raise_on_error=False)
        for i, result in enumerate(results):
            if isinstance(result, NoScriptError):
                results[i] = await self._one(batch[i])  # it did not run; run it now
            elif isinstance(result, Exception):
                raise result
        return results


class AsyncWaiter:
    """A subscription to one topic's wake channel (async twin of ``wake.Waiter``)."""

    def __init__(self, pubsub: Any):
        self._pubsub = pubsub
        self._lock = asyncio.Lock()

    @classmethod
    async def subscribe(cls, client: AsyncRedis, topic: str) -> AsyncWaiter:
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        with map_errors():
            await pubsub.subscribe(wake_channel(topic))
            # Wait for the subscription to be confirmed: only then is no publish missed.
            await pubsub.get_message(timeout=1.0, ignore_subscribe_messages=False)
        return cls(pubsub)

    async def wait(self, timeout: float) -> bool:
        """Sleep until woken or ``timeout`` seconds pass; True when woken."""
        async with self._lock:
            with map_errors():
                woke = await self._pubsub.get_message(timeout=max(0.0, timeout)) is not None
            await self.drain()
            return woke

    async def drain(self) -> None:
        """Forget wake-ups already received (the caller is about to look for work anyway)."""
        with map_errors():
            while await self._pubsub.get_message(timeout=0.0) is not None:
                pass

    async def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a broken connection is not an error
            await self._pubsub.aclose()


def _options(url: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The sync client's options (``connection._options``), with a redis.asyncio Retry of
    the same policy unless the caller gave one."""
    options = connection_options(url, kwargs)
    if "retry" not in kwargs:
        options["retry"] = _Retry(ExponentialBackoff(cap=1.0, base=0.05), RETRY_ATTEMPTS,
                                  supported_errors=_RETRIED)
    return options


class _Retry(Retry):
    """Like ``connection._Retry``: a permanent error (refused credentials, an untrusted
    certificate) is raised at once instead of being retried for the whole budget."""

    async def call_with_retry(self, do: Any, fail: Any, is_retryable: Any = None,
                              with_failure_count: bool = False) -> Any:
        def retryable(error: Exception) -> bool:
            return not is_permanent(error) and (is_retryable is None or is_retryable(error))

        return await super().call_with_retry(do, fail, retryable, with_failure_count)


async def open_async(url: str | None, **kwargs: Any) -> tuple[str, AsyncRedis]:
    """The resolved URL and a ``redis.asyncio`` client for it (cluster detected)."""
    # The sync path starts the embedded server if needed, detects a cluster and warns
    # about unsafe configuration; it runs once per client, so a thread is cheap enough.
    # A ``retry`` option is redis.asyncio's own class, meant for the async client only.
    resolved = await asyncio.to_thread(resolve_url, url)
    sync_options = {k: v for k, v in kwargs.items() if k != "retry"}
    probe = await asyncio.to_thread(connect, resolved, **sync_options)
    kind = aredis.RedisCluster if isinstance(probe, redis.RedisCluster) else aredis.Redis
    probe.close()
    return resolved, kind.from_url(resolved, **_options(resolved, kwargs))
