"""A property-based fuzz of the whole public API (issue 12, point 6): every method of
``Client`` and ``AsyncClient`` called with arguments drawn from valid and hostile values
either returns or raises a typed RMQ error, and a refused call changes nothing (the topic's
snapshot, its registry entry and the topic list are as before).

``RMQ_FUZZ_EXAMPLES`` sets the examples per client and deployment (default 40, which keeps
the test well under a minute in all).
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from core_fixtures import make_client_fixture  # noqa: F401
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rmq
from rmq.errors import RMQError
from rmq.message import Message
from rmq.storage.registry import ConsumerState

pytestmark = pytest.mark.single_node

EXAMPLES = int(os.environ.get("RMQ_FUZZ_EXAMPLES") or 40)


class Deep(dict):
    """JSON nested ``levels`` deep (past Python's recursion limit), shown briefly."""

    def __init__(self, levels: int):
        value: dict[str, object] = {}
        for _ in range(levels - 1):
            value = {"a": value}
        super().__init__(a=value)
        self.levels = levels

    def __repr__(self) -> str:
        return f"Deep({self.levels})"


HOSTILE = st.sampled_from([
    None, True, False, -1, 0, 10**6, 2**70, -(2**70), float("nan"), float("inf"),
    float("-inf"), -1.5, 1e300, 2.5e6, "", "x", "a{b}:c", "5", "é" * 200, b"", b"\xff",
    b"\x00x", [], [1, 2], ["0-1"], [None], (), {}, {"body": b"x"}, {"colour": 1},
    Deep(100_000), object(), Message("a{b}", "default", 0, 1, b"x", 1, 1, 0),
    Message("t", "default", -1, 1, b"x", 1, 1, 0), Message("t", "g:h", 0, 1, b"x", 1, 1, 0),
    Message("t", "default", 0, "1", b"x", 1, 1, 0),
])
TOPIC = st.one_of(st.sampled_from(["t", "other"]), HOSTILE)
GROUP = st.one_of(st.sampled_from(["default", "workers"]), HOSTILE)
BODY = st.one_of(st.binary(max_size=30), st.text(max_size=30), HOSTILE)
SMALL = st.one_of(st.sampled_from([0.001, 0.01, 1, 2.5, 30]), HOSTILE)  # never a long wait
SETTINGS = st.dictionaries(st.sampled_from(["slots", "max_retries", "visibility_timeout",
                                            "max_delay", "retry_backoff", "serial_keys",
                                            "colour"]), HOSTILE, max_size=2)
SEND = st.fixed_dictionaries({}, optional={
    "json": st.one_of(st.integers(), st.text(max_size=10), HOSTILE),
    "priority": st.one_of(st.integers(0, 255), HOSTILE),
    "delay_ms": st.one_of(st.integers(1, 10_000), HOSTILE),
    "deliver_at": HOSTILE, "slot_basis": BODY, "key": BODY})
STATE = st.builds(ConsumerState, TOPIC.map(str), TOPIC, GROUP, st.text(max_size=5),
                  st.integers(0, 10), st.integers(0, 10), st.integers(0, 10),
                  st.integers(0, 10), st.integers(0, 10), st.integers(0, 10))


def _calls(held: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[str, tuple, dict]]:
    """(method, args, kwargs) over every public method; ``held`` draws deliveries."""
    messages = st.one_of(held, st.lists(held, max_size=3), HOSTILE)
    return st.one_of(
        st.tuples(st.just("create_topic"), st.tuples(st.one_of(st.just("other"), HOSTILE)),
                  SETTINGS),
        st.tuples(st.just("alter_topic"), st.tuples(TOPIC), SETTINGS),
        st.tuples(st.just("delete_topic"), st.tuples(st.one_of(st.just("other"), HOSTILE)),
                  st.just({})),
        st.tuples(st.just("topics"), st.just(()), st.just({})),
        st.tuples(st.just("topic"), st.tuples(TOPIC), st.fixed_dictionaries(
            {}, optional={"fresh": HOSTILE}).map(dict)),
        st.tuples(st.sampled_from(["bind", "unbind"]), st.tuples(TOPIC, GROUP), st.just({})),
        st.tuples(st.sampled_from(["pause", "resume", "wake", "stats", "waiter"]),
                  st.tuples(TOPIC), st.just({})),
        st.tuples(st.just("consumers"), st.tuples(TOPIC, SMALL), st.just({})),
        st.tuples(st.just("heartbeat"), st.tuples(st.one_of(STATE, HOSTILE)), st.just({})),
        st.tuples(st.just("forget_consumer"), st.tuples(TOPIC, BODY), st.just({})),
        st.tuples(st.just("send"), st.tuples(TOPIC, BODY), SEND),
        st.tuples(st.just("send_many"), st.tuples(
            TOPIC, st.one_of(st.lists(st.one_of(BODY, SEND), max_size=3), HOSTILE)),
            st.just({})),
        st.tuples(st.sampled_from(["claim", "claim_due"]), st.tuples(TOPIC, GROUP),
                  st.fixed_dictionaries({}, optional={
                      "count": st.one_of(st.integers(1, 5), HOSTILE), "lease": SMALL,
                      "ack": messages})),
        st.tuples(st.just("claim"), st.tuples(TOPIC), st.fixed_dictionaries(
            {"wait": st.one_of(st.just(0.001), HOSTILE)})),
        st.tuples(st.sampled_from(["ack", "release"]), st.tuples(messages), st.just({})),
        st.tuples(st.just("nack"), st.tuples(st.one_of(held, HOSTILE), BODY), st.just({})),
        st.tuples(st.just("extend"), st.tuples(messages, SMALL), st.just({})),
        st.tuples(st.just("recover"), st.tuples(st.one_of(TOPIC)), st.just({})),
        st.tuples(st.sampled_from(["dead_letters", "purge_dead"]), st.tuples(TOPIC, GROUP),
                  st.just({})),
        st.tuples(st.just("requeue_dead"), st.tuples(TOPIC, GROUP, HOSTILE), st.just({})),
        st.tuples(st.just("snapshot"), st.tuples(TOPIC), st.fixed_dictionaries({}, optional={
            "groups": st.one_of(st.lists(GROUP, max_size=2), HOSTILE),
            "slots": st.one_of(st.lists(st.integers(-1, 3), max_size=2), HOSTILE)})),
    )


def _state(client: Any) -> tuple[Any, ...]:
    return (sorted(map(repr, client.snapshot("t"))), client.topic("t", fresh=True),
            client.topics())


def test_every_method_returns_or_raises_a_typed_error_and_a_refusal_changes_nothing(
        make_client):
    client = make_client()
    client.create_topic("t", slots=2, retry_backoff=0)
    client.send_many("t", [b"a", b"b", b"c"])
    held = client.claim("t", count=2)

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(call=_calls(st.sampled_from(held)))
    def check(call: tuple[str, tuple, dict]) -> None:
        method, args, kwargs = call
        before = _state(client)
        try:
            result = getattr(client, method)(*args, **kwargs)
            if method == "snapshot":
                list(result)
        except RMQError as refused:
            assert type(refused).__module__ == "rmq.errors", repr(refused)
            assert _state(client) == before, f"{method}{args}{kwargs} refused but wrote"
        client.create_topic("t", slots=2, retry_backoff=0)  # a fuzzed alter may change it
        client.alter_topic("t", **rmq.TopicSettings(slots=2, retry_backoff=0).to_dict())

    check()
