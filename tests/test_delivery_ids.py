"""Delivery ids never repeat (docs/storage.md, "Delivery ids"): a slot whose counter went
back, as on a replica promoted without the last claims, still hands out ids above every id
it handed out before, so a late settle from before names no delivery made since. The
failover itself, with a real replica: faults/test_replicated_writes.py."""

from __future__ import annotations

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import wait_for

from rmq.client.connect import connect
from rmq.storage.keys import SlotKeys

pytestmark = [pytest.mark.both_deployments, pytest.mark.sync_client]


def test_a_slot_whose_counter_went_back_hands_out_no_id_again(make_client, redis_url):
    client = make_client()
    client.create_topic("renders", slots=1)
    counter = SlotKeys("renders", 0).seq
    server = connect(redis_url)
    before = server.get(counter)  # what a replica that missed the claim holds
    client.send_many("renders", ["a", "b"])
    old = client.claim("renders", count=2)
    claimed_at = client.now()
    if before is None:
        server.delete(counter)
    else:
        server.set(counter, before)
    # a failover takes seconds; here, the next millisecond of Redis's clock is enough
    wait_for(lambda: client.now() > claimed_at, what="Redis's clock past the first claim")
    client.send_many("renders", ["c", "d"])
    new = client.claim("renders", count=2)
    assert {m.seq for m in new}.isdisjoint({m.seq for m in old})
    assert min(m.seq for m in new) > max(m.seq for m in old)
    assert client.ack(old) == 2 and client.ack(new) == 2


def test_ids_grow_with_redis_s_clock_and_stay_exact(make_client, redis_url):
    client = make_client()
    client.create_topic("renders", slots=1)
    client.send("renders", "a")

    def floor(ms: int) -> int:
        return (ms - 1_704_067_200_000) * 1024

    start = client.now()
    (message,) = client.claim("renders", count=1)
    end = client.now()
    assert floor(start) < message.seq <= floor(end + 1)  # its millisecond's floor, plus 1
    assert message.seq < 2 ** 53  # exact in Lua and in every score
