"""A group's max_in_flight where it meets lease extension (SPEC §10, docs/limits.md): a
delivery's lease is extended only with the permit that holds its unit of the limit, so at no
moment do more deliveries hold live leases than the limit allows, even when the extending
process dies between its round trips."""

from __future__ import annotations

from typing import Any

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401

from rmq.storage.codec import lease_until
from rmq.storage.keys import LimitKeys, SlotKeys

pytestmark = pytest.mark.sync_client


def _leases(client: Any, topic: str, group: str, slot: int) -> dict[int, int]:
    """Each in-flight delivery of the slot (by seq) and its lease deadline, epoch ms: its own
    lease when extended, else its claim's range lease."""
    keys = SlotKeys(topic, slot).group(group)
    in_flight = {int(seq) for seq in client.redis.hkeys(keys.inflight)}
    own: dict[int, int] = {}
    ranges: dict[int, int] = {}
    for member, score in client.redis.zrange(keys.leases, 0, -1, withscores=True):
        text = member.decode()
        if ":" in text:
            first, last = (int(n) for n in text.split(":"))
            ranges.update(dict.fromkeys(range(first, last + 1), lease_until(score)))
        else:
            own[int(text)] = lease_until(score)
    return {seq: own.get(seq, ranges.get(seq, 0)) for seq in in_flight}


def _live_leases(client: Any, topic: str, group: str, slots: int, now: int) -> list[str]:
    return [f"{slot}-{seq}" for slot in range(slots)
            for seq, until in _leases(client, topic, group, slot).items() if until > now]


def _permits(client: Any, topic: str, group: str) -> dict[str, int]:
    members = client.redis.zrange(LimitKeys(topic, group).permits, 0, -1, withscores=True)
    return {m.decode(): int(score) for m, score in members if score != float("inf")}


def test_a_lease_whose_unit_another_claim_took_is_not_extended(make_client, clock):
    holder, other = make_client(clock=clock), make_client(clock=clock)
    holder.create_topic("renders", slots=1, visibility_timeout=5)
    holder.set_limits("renders", max_in_flight=1)
    holder.send_many("renders", ["a", "b"])
    (a,) = holder.claim("renders", count=2)
    clock.advance(5_001)  # a's lease and permit run out; nothing recovers a yet
    (b,) = other.claim("renders", count=2)  # granted: a's unit came back with its lease
    assert holder.extend(a, 30) == [False]
    assert _live_leases(holder, "renders", "default", 1, clock()) == [b.id]
    assert _permits(holder, "renders", "default").keys() == {b.id}


def test_an_extended_lease_whose_permit_was_not_taken_keeps_its_unit(make_client, clock):
    holder, other = make_client(clock=clock), make_client(clock=clock)
    holder.create_topic("renders", slots=1, visibility_timeout=5)
    holder.set_limits("renders", max_in_flight=1)
    holder.send_many("renders", ["a", "b"])
    (a,) = holder.claim("renders", count=2)
    clock.advance(5_001)  # expired, but no claim came for its unit yet
    assert holder.extend(a, 30) == [True]
    assert other.claim("renders", count=2) == []
    assert _permits(holder, "renders", "default") == {a.id: clock() + 30_000}


def _awaited(awaitable: Any) -> Any:
    async def run() -> Any:
        return await awaitable
    return run()


def _extend_stepwise(client: Any, messages: list[Any], seconds: float) -> list[Any]:
    """Run ``client.extend`` one effect at a time, reading the group's leases and permits
    after each round trip: what a process killed right after it would leave. Returns those
    readings."""
    inner = getattr(client, "inner", client)  # an AsyncClient behind its bridge, or a Client
    if inner is client:
        perform = client._perform
    else:
        def perform(effect: Any) -> Any:
            return client._wait(_awaited(inner._perform(effect)))
    flow = inner._extend(messages, seconds)
    seen = []
    try:
        effect = next(flow)
        while True:
            result = perform(effect)
            if type(effect) is list:
                seen.append((_leases(client, "renders", "default", 0),
                             _permits(client, "renders", "default")))
            effect = flow.send(result)
    except StopIteration:
        pass
    return seen


def test_no_lease_outlives_its_permit_whatever_round_trip_the_extending_process_dies_after(
        make_client, clock):
    client = make_client(clock=clock)
    client.create_topic("renders", slots=1, visibility_timeout=5)
    client.set_limits("renders", max_in_flight=3)
    client.send_many("renders", ["a", "b", "c"])
    held = client.claim("renders", count=3)
    clock.advance(2_000)
    readings = _extend_stepwise(client, held, 30)
    assert readings
    for leases, permits in readings:
        for m in held:
            assert leases[m.seq] <= permits[m.id], (leases, permits)
    leases, permits = readings[-1]
    assert {f"0-{seq}": until for seq, until in leases.items()} == permits == dict.fromkeys(
        (m.id for m in held), clock() + 30_000)


def test_an_extension_shorter_than_the_lease_moves_no_lease_past_its_permit(make_client,
                                                                            clock):
    client = make_client(clock=clock)
    client.create_topic("renders", slots=1, visibility_timeout=30)
    client.set_limits("renders", max_in_flight=1)
    client.send("renders", "a")
    held = client.claim("renders")
    for leases, permits in _extend_stepwise(client, held, 1):
        assert leases[held[0].seq] <= permits[held[0].id], (leases, permits)


def test_extending_a_recovered_delivery_holds_no_unit_of_the_limit(make_client, clock):
    client = make_client(clock=clock)
    client.create_topic("renders", slots=1, visibility_timeout=5, retry_backoff=0)
    client.set_limits("renders", max_in_flight=1)
    client.send("renders", "a")
    held = client.claim("renders")
    clock.advance(5_001)
    client.recover("renders")  # back to pending: held by nobody
    assert client.extend(held, 30) == [False]
    assert len(client.claim("renders")) == 1


def test_deliveries_of_an_unlimited_group_are_extended_beside_a_limited_ones(make_client,
                                                                            clock):
    client = make_client(clock=clock)
    client.create_topic("renders", slots=2, visibility_timeout=5)
    client.bind("renders", "gpu")
    client.bind("renders", "audit")
    client.set_limits("renders", "gpu", max_in_flight=1)
    client.send_many("renders", ["a", "b"])
    limited = client.claim("renders", "gpu", count=2)
    free = client.claim("renders", "audit", count=2)
    assert (len(limited), len(free)) == (1, 2)
    clock.advance(1_000)
    assert client.extend([*free, *limited], 30) == [True, True, True]
    assert _permits(client, "renders", "gpu") == {limited[0].id: clock() + 30_000}


def test_a_delivery_claimed_before_its_group_had_a_max_in_flight_is_not_extended_under_it(
        make_client, clock):
    client = make_client(clock=clock)
    client.create_topic("renders", slots=1, visibility_timeout=5)
    client.send_many("renders", ["a", "b"])
    early = client.claim("renders", count=1)  # no limit yet: it holds no unit
    client.set_limits("renders", max_in_flight=1)
    assert client.extend(early, 30) == [False]  # a lease past every unit the limit counts
    assert len(client.claim("renders", count=2)) == 1
