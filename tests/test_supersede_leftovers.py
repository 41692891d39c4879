"""A superseding group's `running` entries (docs/storage.md "Supersede and cancel") live only
while they are of use: while their delivery is in flight, or, superseded, while the identity
is pending. A pending message withdrawn by the group's filter, and supersede turned off,
leave none behind, on a single node and a cluster."""

from __future__ import annotations

from typing import Any

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401

from rmq.storage.keys import SlotKeys

pytestmark = [pytest.mark.both_deployments, pytest.mark.sync_client]

SLOTS = 4


def running_fields(client: Any, topic: str, group: str) -> int:
    return sum(client.redis.hlen(SlotKeys(topic, slot).group(group).running)
               for slot in range(SLOTS))


def running_bytes(client: Any, topic: str, group: str) -> int:
    return sum(client.redis.memory_usage(SlotKeys(topic, slot).group(group).running) or 0
               for slot in range(SLOTS))


def superseded_and_dropped(client: Any, topic: str, group: str, sends: list[dict]) -> None:
    """Claims what `sends` made pending, sends it all again (each delivery superseded: a
    newer message pending) and settles the stale deliveries (dropped)."""
    stale = client.claim(topic, group, count=len(sends))
    assert len(stale) == len(sends)
    client.send_many(topic, sends)
    assert all(client.nack(m) == "superseded" for m in stale)


def test_a_pending_value_withdrawn_by_the_filter_takes_its_running_entry_along(client):
    client.create_topic("prices", merge="key", slots=SLOTS)
    client.bind("prices", "eu", tags="eu", supersede=True)
    keys = [f"product-{n}" for n in range(200)]
    eu = [{"body": "price=10", "key": key, "tag": "eu"} for key in keys]
    client.send_many("prices", eu)
    superseded_and_dropped(client, "prices", "eu", eu)
    # the entries keep the streak for the pending identities' next claim
    assert running_fields(client, "prices", "eu") == len(keys)
    client.send_many("prices", [{"body": "price=11", "key": key, "tag": "us"}
                                for key in keys[:100]])  # one call: the batch path
    for key in keys[100:]:
        client.send("prices", "price=11", key=key, tag="us")  # the single send's path
    assert client.stats("prices").groups["eu"].ready == 0
    assert running_fields(client, "prices", "eu") == 0
    assert running_bytes(client, "prices", "eu") == 0


def test_a_superseded_delivery_settled_after_the_withdrawal_leaves_no_entry(client):
    client.create_topic("prices", merge="key", slots=SLOTS)
    client.bind("prices", "eu", tags="eu", supersede=True)
    client.send("prices", "price=10", key="p", tag="eu")
    (stale,) = client.claim("prices", "eu")
    client.send("prices", "price=11", key="p", tag="eu")  # supersedes: pending again
    client.send("prices", "price=12", key="p", tag="us")  # withdrawn: nothing pending
    assert running_fields(client, "prices", "eu") == 2  # the entry and the mark, in flight
    assert client.ack(stale) == 1
    assert running_fields(client, "prices", "eu") == 0


def test_turning_supersede_off_leaves_no_entries_once_their_identities_settle(client):
    client.create_topic("renders", slots=SLOTS)
    client.bind("renders", "gpu", supersede=True)
    bodies = [{"body": bytes([n]) * 256 * 1024} for n in range(1, 21)]  # 20 x 256 KiB
    client.send_many("renders", bodies)
    superseded_and_dropped(client, "renders", "gpu", bodies)
    held = running_bytes(client, "renders", "gpu")
    assert held > 20 * 256 * 1024  # merging by body, an entry holds its identity: the body
    client.bind("renders", "gpu", supersede=False)
    newest = client.claim("renders", "gpu", count=len(bodies))
    assert len(newest) == len(bodies)
    assert client.ack(newest) == len(bodies)
    assert running_fields(client, "renders", "gpu") == 0
    assert running_bytes(client, "renders", "gpu") == 0


def test_a_superseded_identity_s_entry_outlives_its_settle_while_a_newer_one_is_pending(
        client):
    client.create_topic("renders", slots=SLOTS)
    client.bind("renders", "gpu", supersede=True, supersede_limit=2)
    client.send("renders", "p")
    superseded_and_dropped(client, "renders", "gpu", [{"body": "p"}])
    (second,) = client.claim("renders", "gpu")
    client.send("renders", "p")  # the second in a row: the streak reaches the limit
    assert client.nack(second) == "superseded"
    (third,) = client.claim("renders", "gpu")
    client.send("renders", "p")  # the limit: left to finish
    assert not third.superseded
    assert client.ack(third) == 1
    assert client.stats("renders").groups["gpu"].counters["superseded"] == 2
