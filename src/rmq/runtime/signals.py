"""Running consumers in the foreground until SIGINT or SIGTERM."""

from __future__ import annotations

import signal
import threading
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from ..storage.isolation import TOPIC_PROBLEMS
from .threads import log

__all__ = ["run_all", "start_each", "Runnable"]


class Runnable(Protocol):
    """What ``run_all`` runs: a :class:`~rmq.runtime.consumer.Consumer`."""

    @property
    def topic(self) -> str: ...

    @property
    def running(self) -> bool: ...

    def start(self) -> Any: ...

    def stop(self) -> None: ...


def run_all(consumers: Sequence[Runnable]) -> None:
    """Start ``consumers`` and block until SIGINT or SIGTERM (or until one stops), then stop
    them all gracefully."""
    stop = threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    try:
        started = start_each(consumers)
        while not stop.is_set() and all(c.running for c in started):
            stop.wait(0.5)
    finally:
        for consumer in consumers:
            consumer.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


R = TypeVar("R", bound=Runnable)


def start_each(consumers: Sequence[R]) -> list[R]:
    """Start each consumer and return those that started. One whose topic's registry entry
    is broken (CorruptRegistry, WrongKeyType, AccessDenied) is logged and left out: it stops
    no other topic's consumers. When none starts, the first such error is raised."""
    started: list[R] = []
    refused: list[Exception] = []
    for consumer in consumers:
        try:
            consumer.start()
        except TOPIC_PROBLEMS as exc:
            log.error("not consuming topic %r: %s", consumer.topic, exc)
            refused.append(exc)
        else:
            started.append(consumer)
    if refused and not started:
        raise refused[0]
    return started
