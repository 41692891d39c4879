"""A group's binding under concurrent binds (SPEC §13): a consumer starting with
``keep_filters=True`` while an operator binds the same group with filters never erases the
operator's filters, whichever way their round trips interleave.

The binds are the storage layer's sans-IO operations, driven round trip by round trip
against a real Redis in every order, so each interleaving is run, not hoped for."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import rmq
from rmq.client.executor import Executor
from rmq.filters import compile_filter
from rmq.storage import bindings
from rmq.storage.calls import Op

pytestmark = pytest.mark.single_node


class Stepper:
    """Runs an Op one round trip at a time."""

    def __init__(self, op: Op[Any], execute: Executor) -> None:
        self.op, self.execute = op, execute
        self.calls: Any = next(op)
        self.done = False
        self.value: Any = None

    def step(self) -> None:
        try:
            self.calls = self.op.send(self.execute(self.calls))
        except StopIteration as stop:
            self.done, self.value = True, stop.value


def interleavings(rounds: int) -> Iterator[str]:
    """Every order of ``rounds`` steps, each taken by the operator ("o") or the consumer
    ("c"); whichever is left runs to its end afterwards."""
    yield from ("".join(order) for order in itertools.product("oc", repeat=rounds))


@pytest.fixture
def setup(redis_server) -> Iterator[tuple[rmq.Client, Executor]]:
    with redis_server.client() as admin:
        admin.flushall()
    with rmq.Client(redis_server.url) as client:
        connection = redis.Redis.from_url(redis_server.url)
        yield client, Executor(connection)
        connection.close()


def run(order: str, first: Stepper, second: Stepper) -> None:
    for who in order:
        stepper = first if who == "o" else second
        if stepper.done:
            stepper = second if stepper is first else first
        if not stepper.done:
            stepper.step()
    for stepper in (first, second):
        while not stepper.done:
            stepper.step()


def test_a_starting_consumer_never_erases_an_operators_first_filters(setup):
    client, execute = setup
    wanted = compile_filter(where="x = 1")
    for number, order in enumerate(interleavings(6)):
        topic = f"t{number}"
        client.create_topic(topic)
        operator = Stepper(bindings.bind(topic, "g", wanted), execute)
        consumer = Stepper(bindings.bind(topic, "g", None), execute)
        run(order, operator, consumer)
        info = client.topic(topic, fresh=True)
        assert "g" in info.groups, order
        assert info.filter_of("g").program == wanted.program, order
        assert operator.value is not consumer.value, order  # exactly one bound the group


def test_a_rebind_racing_a_starting_consumer_leaves_the_new_filters(setup):
    client, execute = setup
    old, new = compile_filter(where="x = 1"), compile_filter(tags="a")
    for number, order in enumerate(interleavings(6)):
        topic = f"t{number}"
        client.create_topic(topic)
        client.bind(topic, "g", where=old.where)
        operator = Stepper(bindings.bind(topic, "g", new), execute)
        consumer = Stepper(bindings.bind(topic, "g", None), execute)
        run(order, operator, consumer)
        assert client.topic(topic, fresh=True).filter_of("g").program == new.program, order
        assert (operator.value, consumer.value) == (False, False), order
