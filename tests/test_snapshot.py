"""``snapshot(topic)``: a non-destructive read of every message a topic holds, in every state
(dead letters included), with its slot, group, priority, due time and attempts."""

from __future__ import annotations

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import rows

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]


@pytest.mark.both_deployments
@pytest.mark.both_clients
def test_snapshot_shows_every_state_with_its_fields(client, clock):
    client.create_topic("t", slots=1, max_retries=1, retry_backoff=0, visibility_timeout=10)
    start = clock()
    client.send_many("t", [{"body": b"ready", "priority": 7, "key": "k"},
                           {"body": b"flying", "priority": 250},
                           {"body": b"dying", "priority": 240},
                           {"body": b"later", "delay_ms": 5000}])
    clock.advance(10)
    flying, dying = client.claim("t", count=2)
    client.nack(dying, "first")
    client.nack(client.claim("t", count=1)[0], "second")
    found = {r.body: r for r in rows(client, "t")}
    assert set(found) == {b"ready", b"flying", b"dying", b"later"}

    ready = found[b"ready"]
    assert (ready.state, ready.priority, ready.key, ready.attempts, ready.due_at) == (
        "ready", 7, b"k", 0, start)
    assert (ready.topic, ready.group, ready.slot, ready.id) == ("t", "default", 0, None)

    fly = found[b"flying"]
    assert (fly.state, fly.priority, fly.attempts) == ("in_flight", 250, 1)
    assert (fly.id, fly.lease_until) == (f"0-{flying.seq}", clock() + 10_000)

    dead = found[b"dying"]
    assert (dead.state, dead.attempts, dead.error, dead.dead_at) == ("dead", 2, "second", clock())
    assert dead.id == client.dead_letters("t")[0].id

    later = found[b"later"]
    assert (later.state, later.due_at, later.attempts) == ("delayed", start + 5000, 0)


def test_snapshot_shows_the_attempts_of_a_pending_retry(client, clock):
    client.create_topic("t", retry_backoff=1)
    client.send("t", b"x")
    client.nack(client.claim("t")[0], "boom")
    (row,) = rows(client, "t")
    assert (row.state, row.attempts, row.due_at) == ("delayed", 1, clock() + 1000)


def test_snapshot_changes_nothing(client):
    client.create_topic("t", slots=4)
    client.send_many("t", [f"m{i}" for i in range(10)])
    client.claim("t", count=3)
    first = sorted(rows(client, "t"), key=lambda r: r.body)
    assert sorted(rows(client, "t"), key=lambda r: r.body) == first
    assert client.stats("t").groups["default"].ready == 7
    assert len(client.claim("t", count=100)) == 7


@pytest.mark.both_deployments
def test_snapshot_covers_every_group_and_can_be_narrowed(client):
    client.create_topic("t", slots=4)
    client.bind("t", "a")
    client.bind("t", "b")
    result = client.send("t", b"x")
    assert sorted(r.group for r in rows(client, "t")) == ["a", "b"]
    assert [r.group for r in rows(client, "t", groups=["b"])] == ["b"]
    assert len(rows(client, "t", slots=[result.slot])) == 2
    other = (result.slot + 1) % 4
    assert rows(client, "t", slots=[other]) == []


def test_snapshot_rows_convert_to_dicts(client):
    client.create_topic("t")
    client.send("t", b"x")
    (row,) = rows(client, "t")
    data = row.to_dict()
    assert (data["body"], data["state"], data["group"]) == (b"x", "ready", "default")
