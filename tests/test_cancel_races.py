"""Cancel racing the message it cancels (SPEC §14, docs/semantics.md "Supersede and cancel"):
``cancel`` finds the message by scanning, then cancels it in one script call per group and
slot; whatever a claim, a retry or an ack did between the two, the cancel reaches the
message where it went (pending or running) or it is truly gone, and never answers "nothing"
while it runs. A cancelled delivery later superseded counts once, and cancelling a pending
message leaves none of its identity's supersede entries behind.

Each race is run, not hoped for: the client's own cancel flow is driven round trip by round
trip, and the competing operation runs just before the round that carries the script."""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator
from functools import partial
from typing import Any

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import states

import rmq
from rmq.errors import UnknownMessage
from rmq.storage.calls import Call
from rmq.storage.keys import SlotKeys
from rmq.storage.scripts import script

pytestmark = [pytest.mark.both_deployments, pytest.mark.sync_client]

NOTHING = {"ready": [], "delayed": [], "in_flight": [], "dead": []}


def racing(flow: Generator[Any, Any, Any], between: Callable[[], None]
           ) -> Generator[Any, Any, Any]:
    """``flow``, with ``between()`` run once just before the round trip that carries the
    cancel script (after the scans that found the message)."""
    effect = next(flow)
    raced = False
    while True:
        if not raced and isinstance(effect, list) and any(
                isinstance(call, Call) and call.script == script("cancel") for call in effect):
            between()
            raced = True
        try:
            effect = flow.send((yield effect))
        except StopIteration as done:
            return done.value


def cancel_racing(client: rmq.Client, topic: str, message_id: str,
                  between: Callable[[], None], group: str | None = None) -> rmq.Cancelled:
    return client._run(racing(client._cancel(topic, message_id, group), between))


def counters(client: rmq.Client, topic: str, group: str = "default") -> dict[str, int]:
    return client.stats(topic).groups[group].counters


def running_entries(client: rmq.Client, topic: str, slot: int, group: str = "default"
                    ) -> dict[bytes, bytes]:
    return client.redis.hgetall(SlotKeys(topic, slot).group(group).running)


def test_a_claim_between_the_find_and_the_cancel_is_told_to_stop(make_client):
    client, consumer = make_client(), make_client()
    client.create_topic("renders", slots=4)
    sent = client.send("renders", "product-42")
    claimed: list[rmq.Message] = []
    assert cancel_racing(client, "renders", sent.message_id,
                         lambda: claimed.extend(consumer.claim("renders"))) == (0, 1)
    (running,) = claimed
    assert running.wait_superseded(timeout=10) and running.stop_reason == "cancelled"
    assert consumer.nack(running, "stopped") == "cancelled"  # dropped, not retried
    assert states(client, "renders") == NOTHING
    assert counters(client, "renders")["cancelled"] == 1


def test_a_message_pending_and_running_whose_pending_one_is_claimed_meanwhile_stops_both(
        make_client):
    client, consumer = make_client(), make_client()
    client.create_topic("prices", merge="key", slots=4)
    sent = client.send("prices", "price=10", key="product-42")
    (first,) = consumer.claim("prices")
    client.send("prices", "price=12", key="product-42")  # pending again while it runs
    claimed: list[rmq.Message] = []
    assert cancel_racing(client, "prices", sent.message_id,
                         lambda: claimed.extend(consumer.claim("prices"))) == (0, 2)
    for delivery in (first, *claimed):
        assert consumer.nack(delivery, "stopped") == "cancelled"
    assert states(client, "prices") == NOTHING
    assert counters(client, "prices")["cancelled"] == 2


def test_a_delivery_failing_back_to_pending_meanwhile_is_removed_there(make_client):
    client, consumer = make_client(), make_client()
    client.create_topic("renders", slots=4, retry_backoff=0)
    sent = client.send("renders", "product-42")
    (running,) = consumer.claim("renders")
    assert cancel_racing(client, "renders", sent.message_id,
                         lambda: consumer.nack(running, "failed")) == (1, 0)
    assert states(client, "renders") == NOTHING
    assert consumer.claim("renders") == []


def test_a_delivery_retried_and_claimed_again_meanwhile_is_told_to_stop(make_client):
    client, consumer = make_client(), make_client()
    client.create_topic("renders", slots=4, retry_backoff=0)
    sent = client.send("renders", "product-42")
    (first,) = consumer.claim("renders")
    again: list[rmq.Message] = []

    def fail_and_claim_again() -> None:
        assert consumer.nack(first, "failed") == "retried"
        again.extend(consumer.claim("renders"))

    assert cancel_racing(client, "renders", sent.message_id, fail_and_claim_again) == (0, 1)
    (second,) = again
    assert second.id != first.id and second.attempts == 2
    assert consumer.nack(second, "stopped") == "cancelled"
    assert states(client, "renders") == NOTHING


def test_a_delivery_acknowledged_meanwhile_is_gone_and_the_cancel_says_nothing_was_left(
        make_client):
    client, consumer = make_client(), make_client()
    client.create_topic("renders", slots=4)
    sent = client.send("renders", "product-42")
    (running,) = consumer.claim("renders")
    assert cancel_racing(client, "renders", sent.message_id,
                         lambda: consumer.ack(running)) == (0, 0)
    assert states(client, "renders") == NOTHING
    assert counters(client, "renders")["cancelled"] == 0


def test_a_cancelled_delivery_later_superseded_counts_once_as_cancelled(make_client):
    client, consumer = make_client(), make_client()
    client.create_topic("prices", merge="key", slots=4)
    client.bind("prices", "gpu", supersede=True)
    sent = client.send("prices", "price=10", key="product-42")
    (running,) = consumer.claim("prices", "gpu")
    assert client.cancel("prices", sent.message_id, group="gpu") == (0, 1)
    client.send("prices", "price=12", key="product-42")  # would supersede it
    assert consumer.nack(running, "stopped") == "cancelled"
    assert (counters(client, "prices", "gpu")["cancelled"],
            counters(client, "prices", "gpu")["superseded"]) == (1, 0)
    (newest,) = consumer.claim("prices", "gpu")
    assert newest.body == b"price=12"
    assert consumer.ack(newest) == 1
    assert running_entries(client, "prices", running.slot, "gpu") == {}


def test_cancelling_a_pending_message_leaves_no_supersede_entry_of_its_identity(make_client):
    client, consumer = make_client(), make_client()
    client.create_topic("prices", merge="key", slots=4)
    client.bind("prices", "gpu", supersede=True)
    client.send("prices", "price=10", key="product-42")
    (stale,) = consumer.claim("prices", "gpu")
    newer = client.send("prices", "price=12", key="product-42")  # supersedes it
    assert consumer.nack(stale, "stopped") == "superseded"
    assert running_entries(client, "prices", stale.slot, "gpu") != {}  # the streak, kept
    assert client.cancel("prices", newer.message_id, group="gpu") == (1, 0)
    assert running_entries(client, "prices", stale.slot, "gpu") == {}


def test_cancelling_the_pending_message_of_a_superseded_delivery_still_running_leaves_nothing(
        make_client):
    client, consumer = make_client(), make_client()
    client.create_topic("prices", merge="key", slots=4)
    client.bind("prices", "gpu", supersede=True)
    client.send("prices", "price=10", key="product-42")
    (stale,) = consumer.claim("prices", "gpu")
    newer = client.send("prices", "price=12", key="product-42")  # supersedes it
    # both: the pending one removed, the running one superseded already (counted so)
    assert client.cancel("prices", newer.message_id, group="gpu") == (1, 0)
    assert consumer.nack(stale, "stopped") == "superseded"
    assert running_entries(client, "prices", stale.slot, "gpu") == {}
    assert (counters(client, "prices", "gpu")["cancelled"],
            counters(client, "prices", "gpu")["superseded"]) == (1, 1)


def claim_into(claimed: list[rmq.Message], consumer: rmq.Client) -> None:
    claimed.extend(consumer.claim("renders"))


def test_cancels_racing_claims_in_a_tight_loop_never_miss_a_running_delivery(make_client):
    client, consumer = make_client(), make_client()
    client.create_topic("renders", slots=4)
    for round_ in range(40):
        sent = client.send("renders", f"product-{round_}")
        claimed: list[rmq.Message] = []
        claimer = threading.Thread(target=partial(claim_into, claimed, consumer))
        claimer.start()
        try:
            answer: rmq.Cancelled | None = client.cancel("renders", sent.message_id)
        except UnknownMessage:
            answer = None  # possible only if nothing of it is left, checked below
        claimer.join(10)
        if claimed:
            told = consumer.nack(claimed[0], "stopped")
            assert answer == (0, 1) and told == "cancelled", (round_, answer, told)
        else:
            assert answer == (1, 0), (round_, answer)
        assert states(client, "renders") == NOTHING, round_
