"""``rmq.AsyncClient`` behind the blocking interface of ``rmq.Client``, so that the behaviour
tests written against ``Client`` prove the asyncio client too.

Every coroutine method runs on one event loop in a thread of its own; async iterators are
read to the end. ``redis`` is a plain redis-py client of the same server, for the tests that
look at Redis directly.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import rmq
from rmq.client.connect import connect


class AsyncBridge:
    """An ``AsyncClient`` whose methods block until their coroutine is done."""

    def __init__(self, url: str, **options: Any):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="rmq-test-async-bridge")
        self._thread.start()
        self.inner: rmq.AsyncClient = self._wait(rmq.AsyncClient.connect(url, **options))
        self.redis = connect(url)

    def _wait(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=120)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.inner, name)
        if name == "transaction":  # an AsyncTransaction, its methods blocking
            return lambda *args, **kwargs: BlockingTransaction(self, attribute(*args, **kwargs))
        if name == "ready_watch":  # an AsyncReadyWatch, its methods blocking
            return lambda *args, **kwargs: BlockingTransaction(
                self, self._wait(attribute(*args, **kwargs)))
        if inspect.iscoroutinefunction(attribute):
            return lambda *args, **kwargs: self._wait(attribute(*args, **kwargs))
        if inspect.isasyncgenfunction(attribute):
            return lambda *args, **kwargs: iter(self._wait(_read(attribute(*args, **kwargs))))
        return attribute

    def close(self) -> None:
        self._wait(self.inner.close())
        self.redis.close()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


class BlockingTransaction:
    """An ``AsyncTransaction`` whose methods block, a ``with`` block for ``async with``."""

    def __init__(self, bridge: AsyncBridge, inner: Any):
        self._bridge = bridge
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.inner, name)
        if inspect.iscoroutinefunction(attribute):
            return lambda *args, **kwargs: self._bridge._wait(attribute(*args, **kwargs))
        return attribute

    def __enter__(self) -> BlockingTransaction:
        self._bridge._wait(self.inner.__aenter__())
        return self

    def __exit__(self, *exc: Any) -> None:
        self._bridge._wait(self.inner.__aexit__(*exc))


async def _read(rows: AsyncIterator[Any]) -> list[Any]:
    return [row async for row in rows]


def client_of_kind(kind: str) -> Callable[..., Any]:
    """The constructor of a test client: ``rmq.Client``, or the bridged ``AsyncClient``."""
    return {"sync": rmq.Client, "async": AsyncBridge}[kind]
