"""The client layer: ``Client`` and ``AsyncClient``, the queue's API over a Redis connection."""

from typing import Any

from .clock import Clock, ServerClock, system_clock
from .sync import Client

__all__ = ["Client", "AsyncClient", "Clock", "ServerClock", "system_clock"]


def __getattr__(name: str) -> Any:  # the asyncio client loads redis.asyncio on first use
    if name == "AsyncClient":
        from .asynchronous import AsyncClient

        return AsyncClient
    raise AttributeError(name)
