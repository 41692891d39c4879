"""Peeks and the message finder (issue 10, point 3): a page of one state read without
changing anything, and a message found by body or key with its state, slot, priority, due
time and attempts."""

from __future__ import annotations

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import ManualClock, states

import rmq
from rmq.errors import InvalidQuery

pytestmark = pytest.mark.extras


def test_a_page_of_ready_messages_follows_claim_order_within_a_slot(client: rmq.Client) -> None:
    client.create_topic("t", slots=1)
    client.send_many("t", ["low-1", {"body": "high", "priority": 200}, "low-2"])
    page = client.peek("t", "ready", limit=2)
    assert page.total == 3 and page.offset == 0
    assert [(r.body, r.priority) for r in page.rows] == [(b"high", 200), (b"low-1", 128)]
    rest = client.peek("t", "ready", offset=2, limit=2)
    assert [r.body for r in rest.rows] == [b"low-2"] and rest.total == 3
    assert client.peek("t", "ready", offset=3).rows == []


def test_paging_every_slot_covers_each_message_once(client: rmq.Client) -> None:
    client.create_topic("t", slots=8)
    bodies = {f"m{i}".encode() for i in range(100)}
    client.send_many("t", sorted(bodies))
    seen: list[bytes] = []
    for offset in range(0, 100, 7):
        page = client.peek("t", "ready", offset=offset, limit=7)
        assert page.total == 100
        seen += [r.body for r in page.rows]
    assert sorted(seen) == sorted(bodies)
    one_slot = client.peek("t", "ready", slot=3, limit=1000)
    assert {r.slot for r in one_slot.rows} == {3}
    assert one_slot.total == client.stats("t").groups["default"].slots[3].ready


def test_peeks_show_due_time_attempts_lease_and_last_error(client: rmq.Client,
                                                           clock: ManualClock) -> None:
    client.create_topic("t", slots=1, max_retries=1, retry_backoff=0)
    client.send_many("t", ["a", "b", {"body": "later", "delay_ms": 60_000}])
    a, b = client.claim("t", count=2, lease=30)
    client.nack(a, "first failure")  # back to ready, attempts 1
    (delayed,) = client.peek("t", "delayed").rows
    assert delayed.body == b"later" and delayed.due_at == clock.now + 60_000
    (held,) = client.peek("t", "in_flight").rows
    assert held.body == b"b" and held.lease_until == clock.now + 30_000
    assert held.id == b.id
    (ready,) = client.peek("t", "ready").rows
    assert ready.body == b"a" and ready.attempts == 1
    (again,) = client.claim("t", count=1)
    client.nack(again, "second failure")
    (dead,) = client.peek("t", "dead").rows
    assert dead.body == b"a" and dead.error == "second failure" and dead.attempts == 2
    assert states(client, "t") == {"ready": [], "delayed": [b"later"], "in_flight": [b"b"],
                                   "dead": [b"a"]}  # peeking changed nothing


def test_a_page_in_flight_shows_the_newest_lease_first(client: rmq.Client,
                                                       clock: ManualClock) -> None:
    client.create_topic("t", slots=1)
    client.send_many("t", [f"m{i}" for i in range(6)])
    first = client.claim("t", count=3, lease=10)
    clock.advance(1000)
    second = client.claim("t", count=3, lease=10)
    client.ack(second[2])
    client.extend(first[1], 30)  # a lease of its own, the newest
    page = client.peek("t", "in_flight", limit=2)
    assert page.total == 5
    assert [(r.body, r.lease_until) for r in page.rows] == [
        (b"m1", clock.now + 30_000), (b"m4", clock.now + 10_000)]
    rest = client.peek("t", "in_flight", offset=2, limit=10)
    assert [(r.body, r.lease_until) for r in rest.rows] == [
        (b"m3", clock.now + 10_000), (b"m2", clock.now + 9_000), (b"m0", clock.now + 9_000)]
    assert [r.id for r in rest.rows] == [second[0].id, first[2].id, first[0].id]


@pytest.mark.parametrize("bad", [
    {"state": "pending"}, {"state": "ready", "slot": 4}, {"state": "ready", "slot": -1},
    {"state": "ready", "offset": -1}, {"state": "ready", "limit": 0},
    {"state": "ready", "limit": 100_000},
])
@pytest.mark.single_node
def test_a_page_out_of_range_is_a_clear_error(client: rmq.Client, bad: dict) -> None:
    client.create_topic("t", slots=4)
    with pytest.raises(InvalidQuery):
        client.peek("t", **bad)


def test_find_by_body_reports_the_message_in_every_group_and_state(client: rmq.Client) -> None:
    client.create_topic("t", slots=4)
    client.bind("t", "billing")
    client.bind("t", "audit")
    client.send_many("t", ["needle", "hay", {"body": "needle", "priority": 250}])
    (held,) = [m for m in client.claim("t", "audit", count=2) if m.body == b"needle"]
    found = client.find_messages("t", "needle")
    assert [(r.group, r.state, r.priority) for r in found] == [
        ("audit", "in_flight", 250), ("billing", "ready", 250)]
    assert {r.slot for r in found} == {held.slot}
    assert found[0].id == held.id and found[0].lease_until
    assert client.find_messages("t", "absent") == []


def test_find_by_key_finds_every_message_of_the_key(client: rmq.Client) -> None:
    client.create_topic("t", slots=8, serial_keys=True)
    client.send_many("t", [{"body": "v1", "key": "order-7"}, {"body": "v2", "key": "order-7"},
                           {"body": "v1", "key": "order-8"}, {"body": "*?[", "key": "a*"}])
    found = client.find_messages("t", key="order-7")
    assert sorted(r.body for r in found) == [b"v1", b"v2"]
    assert {r.key for r in found} == {b"order-7"}
    (exact,) = client.find_messages("t", "v1", key="order-8")
    assert exact.key == b"order-8"
    assert client.find_messages("t", "v1") == []  # a keyed message is found with its key
    (globbed,) = client.find_messages("t", key="a*")  # glob characters are literal
    assert globbed.body == b"*?["


def test_find_in_every_slot_reaches_a_message_sent_with_another_slot_basis(
        client: rmq.Client) -> None:
    client.create_topic("t", slots=16)
    client.send("t", "moved", slot_basis="somewhere-else")
    client.send("t", "moved-too", slot_basis="elsewhere", key="k")
    assert client.find_messages("t", "moved", key="somewhere-else")  # the basis is its key
    assert client.find_messages("t", "moved-too", key="k") == []
    (found,) = client.find_messages("t", "moved-too", key="k", every_slot=True)
    assert found.state == "ready"


def test_find_needs_a_body_or_a_key(client: rmq.Client) -> None:
    client.create_topic("t")
    with pytest.raises(InvalidQuery, match="body or a key"):
        client.find_messages("t")
    with pytest.raises(rmq.errors.InvalidMessage):
        client.find_messages("t", 42)  # type: ignore[arg-type]
