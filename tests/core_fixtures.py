"""Fixtures of the core behaviour tests: a manual clock and clients on ``redis_url``.

A test module imports all of them (``from core_fixtures import *_fixture  # noqa: F401``);
each is registered under the name without ``_fixture``, so a test's ``client`` argument does
not shadow an import. ``redis_url`` comes from ``conftest.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from helpers import ManualClock

import rmq

__all__ = ["clock_fixture", "client_fixture", "make_client_fixture"]


@pytest.fixture(name="clock")
def clock_fixture() -> ManualClock:
    return ManualClock()


@pytest.fixture(name="make_client")
def make_client_fixture(redis_url: str) -> Iterator[Callable[..., rmq.Client]]:
    """A factory of clients on ``redis_url``, all closed at teardown."""
    made: list[rmq.Client] = []

    def make(**options: object) -> rmq.Client:
        made.append(rmq.Client(redis_url, **options))  # type: ignore[arg-type]
        return made[-1]

    yield make
    for c in made:
        c.close()


@pytest.fixture(name="client")
def client_fixture(make_client: Callable[..., rmq.Client], clock: ManualClock) -> rmq.Client:
    """A client whose time moves only with ``clock``."""
    return make_client(clock=clock)

