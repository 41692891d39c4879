"""Fixtures of the core behaviour tests: a manual clock and clients on ``redis_url``.

A test module imports all of them (``from core_fixtures import *_fixture  # noqa: F401``);
each is registered under the name without ``_fixture``, so a test's ``client`` argument does
not shadow an import. ``redis_url`` comes from ``conftest.py``, and so does ``client_kind``:
each behaviour test runs with ``rmq.Client`` (``[sync]``) and with ``rmq.AsyncClient``
behind a blocking bridge (``[async]``, ``async_bridge.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from async_bridge import client_of_kind
from helpers import ManualClock

__all__ = ["clock_fixture", "client_fixture", "make_client_fixture"]


@pytest.fixture(name="clock")
def clock_fixture() -> ManualClock:
    return ManualClock()


@pytest.fixture(name="make_client")
def make_client_fixture(redis_url: str, client_kind: str) -> Iterator[Callable[..., Any]]:
    """A factory of clients on ``redis_url`` of this test's kind, all closed at teardown;
    ``kind="sync"`` asks for an ``rmq.Client`` whatever the test's kind (the worker runtime
    runs on one)."""
    made: list[Any] = []

    def make(kind: str | None = None, **options: Any) -> Any:
        made.append(client_of_kind(kind or client_kind)(redis_url, **options))
        return made[-1]

    yield make
    for c in made:
        c.close()


@pytest.fixture(name="client")
def client_fixture(make_client: Callable[..., Any], clock: ManualClock) -> Any:
    """A client whose time moves only with ``clock``."""
    return make_client(clock=clock)
