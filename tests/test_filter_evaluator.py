"""The send script's filter evaluator (``lua/includes/filter.lua``) against the Python
reference (``rmq.filters.evaluate``), through real Redis; and a rebind while sends go on:
each batch is filtered by one version of the group's filters, never half by each."""

from __future__ import annotations

import itertools
import json
import threading

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import drain
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_filter_expressions import TABLE

from rmq.filters import compile_filter, evaluate

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]

NAMES = ("a", "b", "c", "s")
values = st.one_of(st.integers(-3, 3), st.sampled_from([0.5, -1.5, 2.0]), st.booleans(),
                   st.sampled_from(["", "x", "y", "it's"]))


def literal(value: object) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


operands = st.one_of(st.sampled_from(NAMES), st.just("TAG"), values.map(literal))
comparisons = st.one_of(
    st.tuples(operands, st.sampled_from(["=", "<>", "<", "<=", ">", ">="]), operands)
    .map(" ".join),
    st.tuples(operands, st.sampled_from(["", "NOT "]), operands, operands)
    .map(lambda t: f"{t[0]} {t[1]}BETWEEN {t[2]} AND {t[3]}"),
    st.tuples(operands, st.sampled_from(["", "NOT "]), st.lists(values, min_size=1, max_size=3))
    .map(lambda t: f"{t[0]} {t[1]}IN ({', '.join(literal(v) for v in t[2])})"),
    st.tuples(operands, st.sampled_from(["IS NULL", "IS NOT NULL"])).map(" ".join),
    st.sampled_from(["TRUE", "FALSE"]),
)
expressions = st.recursive(comparisons, lambda inner: st.one_of(
    st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(" ".join),
    inner.map(lambda e: f"NOT {e}"),
    inner.map(lambda e: f"({e})"),
), max_leaves=6)
messages = st.lists(st.tuples(st.sampled_from([None, "x", "y"]),
                              st.dictionaries(st.sampled_from(NAMES), values)),
                    min_size=1, max_size=12)
topics = (f"t{n}" for n in itertools.count())


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=expressions, sent=messages)
def test_the_send_script_filters_as_the_reference_evaluator_does(client, where, sent):
    topic = next(topics)

    client.create_topic(topic, slots=2)
    client.bind(topic, "g", where=where)
    client.send_many(topic, [{"body": str(n), "tag": tag, "properties": props}
                             for n, (tag, props) in enumerate(sent)])
    program = json.loads(compile_filter(where=where).program)
    expected = sorted(str(n) for n, (tag, props) in enumerate(sent)
                      if evaluate(program, tag, props) is True)
    assert sorted(m.text for m in drain(client, topic, "g")) == expected
    client.delete_topic(topic)


def test_the_send_script_gives_each_expression_of_the_table_its_value(client):
    client.create_topic("t", slots=4)
    for n, (where, _, _, _) in enumerate(TABLE):
        client.bind("t", f"r{n}", where=where)
    client.send_many("t", [{"body": str(n), "tag": tag, "properties": properties}
                           for n, (_, properties, tag, _) in enumerate(TABLE)])
    for n, (where, _, _, expected) in enumerate(TABLE):
        stored = {m.text for m in drain(client, "t", f"r{n}")}
        assert (str(n) in stored) is (expected is True), where


@pytest.mark.both_deployments
def test_a_rebind_under_load_never_half_filters_a_batch(make_client):
    sender = make_client(registry_ttl=0)  # every batch reads the registry afresh
    admin = make_client()
    sender.create_topic("t", slots=4)
    low, high = "x < 50", "x >= 50"
    admin.bind("t", "g", where=low)
    stop = threading.Event()
    rebinds = 0

    def rebind() -> None:
        nonlocal rebinds
        while not stop.is_set():
            admin.bind("t", "g", where=high if rebinds % 2 == 0 else low)
            rebinds += 1

    thread = threading.Thread(target=rebind)
    thread.start()
    try:
        for batch in range(60):
            sender.send_many("t", [{"body": f"{batch}:{x}", "properties": {"x": x}}
                                   for x in range(0, 100, 7)])
    finally:
        stop.set()
        thread.join(30)
    assert rebinds > 1
    stored: dict[str, set[int]] = {}
    for message in drain(sender, "t", "g"):
        batch, x = message.text.split(":")
        stored.setdefault(batch, set()).add(int(x))
    below = {x for x in range(0, 100, 7) if x < 50}
    above = {x for x in range(0, 100, 7) if x >= 50}
    assert stored, "no batch was stored"
    assert all(xs in (below, above) for xs in stored.values()), stored
    versions = {frozenset(xs) for xs in stored.values()}
    assert versions == {frozenset(below), frozenset(above)}  # both versions were seen
    filtered = sender.stats("t").groups["g"].counters
    assert filtered["sent"] + filtered["filtered"] == 60 * len(range(0, 100, 7))
