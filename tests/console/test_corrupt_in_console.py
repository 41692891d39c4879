"""The console's peek and finder over a stored entry damaged by hand: the API answers 200
with the damaged row marked ``corrupt`` (its stored bytes as ``body``, ``error`` saying what
failed), never a 500; cancelling reads past it."""

from __future__ import annotations

import pytest
from console_helpers import TestClient

import rmq
from rmq.storage.keys import SlotKeys

pytestmark = pytest.mark.extras

DAMAGED = b"\x00\x00\x01"  # a member cut short
RECORD = b"not a record"


def _keys() -> SlotKeys:
    return SlotKeys("t", 0)


def _rows(response) -> list[dict]:
    assert response.status_code == 200, response.text
    return response.json()["rows"]


@pytest.fixture
def damaged(client: rmq.Client) -> rmq.Client:
    """Topic ``t`` (one slot, no retries) holding ``good`` ready, a damaged ready member, a
    delivery whose in-flight record and a dead letter whose record are damaged."""
    client.create_topic("t", slots=1, max_retries=0)
    client.send_many("t", [b"dies", b"runs", b"good"])
    k = _keys().group("default")
    dying, running = client.claim("t", count=2)
    client.nack(dying, "no")
    client.redis.hset(k.dead, str(dying.seq), RECORD)
    client.redis.hset(k.inflight, str(running.seq), RECORD)
    ((_, score),) = client.redis.zrange(k.ready, -1, -1, withscores=True)
    client.redis.zadd(k.ready, {DAMAGED: score + 1})
    return client


@pytest.mark.parametrize("state,body,names", [
    ("ready", "\x00\x00\x01", "ready message"),
    ("in_flight", "not a record", "in-flight record"),
    ("dead", "not a record", "dead record"),
])
def test_a_page_of_messages_shows_a_damaged_entry_as_a_corrupt_row(
        api: TestClient, damaged: rmq.Client, state: str, body: str, names: str) -> None:
    rows = _rows(api.get("/api/topics/t/messages", params={"state": state}))
    bad = [r for r in rows if r["corrupt"]]
    assert [(r["state"], r["slot"], r["body"]) for r in bad] == [(state, 0, body)]
    assert bad[0]["error"].startswith(f"cannot decode the stored {names} ")
    if state != "ready":
        assert bad[0]["id"].startswith("0-")
    else:
        assert [r["body"] for r in rows if not r["corrupt"]] == ["good"]


def test_the_finder_shows_the_match_and_the_damaged_entries_it_read(
        api: TestClient, damaged: rmq.Client) -> None:
    rows = _rows(api.get("/api/topics/t/find", params={"body": "good", "every_slot": True}))
    # (the damaged ready member is not read: a find by body reads the ready members of the
    # extended form only, by a glob on their first bytes)
    assert [(r["state"], r["corrupt"]) for r in rows] == [
        ("ready", False), ("in_flight", True), ("dead", True)]
    assert rows[0]["body"] == "good"


def test_a_cancel_reads_past_a_damaged_entry(api: TestClient, damaged: rmq.Client) -> None:
    good = rmq.message_id_of("t", b"good")
    answer = api.post("/api/topics/t/cancel", json={"message_id": good, "group": None})
    assert answer.status_code == 200, answer.text
    assert answer.json()["pending"] == 1
    missing = api.post("/api/topics/t/cancel", json={"message_id": good, "group": None})
    assert missing.status_code == 404
    assert "1 stored entry could not be decoded" in missing.json()["error"]
