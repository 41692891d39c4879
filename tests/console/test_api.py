"""The console's JSON API (issue 10, point 3): every page's data and every form's action,
over a real Redis. Refused input gets a status and a message naming the problem, and
changes nothing."""

from __future__ import annotations

import json
import re
import time

import pytest
from console_helpers import TestClient
from helpers import wait_for

import rmq
from rmq.console import create_app
from rmq.console.views import ConsumerRates, heat, history_series
from rmq.storage.registry import ConsumerState

pytestmark = pytest.mark.extras

JSON = {"Content-Type": "application/json"}


def error_of(response, status: int) -> str:
    assert response.status_code == status, response.text
    return response.json()["error"]


def test_a_topic_created_through_the_api_is_registered_with_its_settings(
        api: TestClient, client: rmq.Client) -> None:
    created = api.post("/api/topics", json={"name": "prices", "slots": 4, "max_retries": 3,
                                            "serial_keys": True})
    assert created.status_code == 201, created.text
    assert created.json()["settings"]["slots"] == 4
    info = client.topic("prices", fresh=True)
    assert (info.settings.slots, info.settings.max_retries, info.settings.serial_keys) == (
        4, 3, True)
    assert api.get("/api/topics").json() == {"topics": ["prices"]}


@pytest.mark.parametrize(("body", "status", "words"), [
    ({"name": "t", "slots": 3}, 400, "slots must be a power of two"),
    ({"name": "t", "max_retries": -1}, 400, "max_retries must be an integer from 0"),
    ({"name": "bad name!"}, 400, "invalid topic name 'bad name!'"),
    ({"name": "t", "slots": "many"}, 422, "slots: Input should be a valid integer"),
    ({"name": "t", "colour": "red"}, 422, "colour: Extra inputs are not permitted"),
    ({"slots": 4}, 422, "name: Field required"),
])
def test_bad_settings_are_refused_by_name_and_create_nothing(
        api: TestClient, client: rmq.Client, body: dict, status: int, words: str) -> None:
    assert words in error_of(api.post("/api/topics", json=body), status)
    assert client.topics() == []


def test_an_existing_topic_with_other_settings_is_a_conflict(api: TestClient,
                                                             client: rmq.Client) -> None:
    client.create_topic("t", slots=4)
    assert "exists with other settings" in error_of(
        api.post("/api/topics", json={"name": "t", "slots": 8}), 409)
    assert api.post("/api/topics", json={"name": "t", "slots": 4}).status_code == 201


def test_errors_name_the_fix_in_the_console_s_words_not_a_python_call(
        api: TestClient, client: rmq.Client) -> None:
    assert error_of(api.get("/api/topics/nope"), 404) == (
        "unknown topic 'nope': create it on the Topics page or with POST /api/topics")
    client.create_topic("t", slots=4, max_retries=5)
    assert error_of(api.post("/api/topics", json={"name": "t", "slots": 8, "max_retries": 5}),
                    409) == "topic 't' exists with other settings (slots 4, not 8): slots " \
                            "cannot change after creation"
    assert error_of(api.post("/api/topics", json={"name": "t", "slots": 4, "max_retries": 2}),
                    409) == ("topic 't' exists with other settings (max_retries 5, not 2): "
                             "change them under Settings on its page, or with "
                             "PATCH /api/topics/t")
    assert error_of(api.post("/api/topics", content=b"{name: t}", headers=JSON), 422) == (
        "the request body is not valid JSON (Expecting property name enclosed in double "
        "quotes)")


def test_alter_changes_settings_and_refuses_slots_without_changing_anything(
        api: TestClient, client: rmq.Client) -> None:
    client.create_topic("t", slots=4, max_retries=5)
    client.send("t", "x")
    changed = api.patch("/api/topics/t", json={"max_retries": 2, "visibility_timeout": 5})
    assert changed.json()["settings"]["max_retries"] == 2
    assert client.topic("t", fresh=True).settings.visibility_timeout == 5
    words = error_of(api.patch("/api/topics/t", json={"max_retries": 9, "slots": 8}), 400)
    assert "slots cannot be changed" in words
    assert client.topic("t", fresh=True).settings.max_retries == 2  # not half applied
    assert "nothing to change" in error_of(api.patch("/api/topics/t", json={}), 400)
    assert "unknown topic 'nope'" in error_of(api.patch("/api/topics/nope",
                                                        json={"max_retries": 1}), 404)


def test_pause_resume_bind_and_unbind(api: TestClient, client: rmq.Client) -> None:
    client.create_topic("t")
    assert api.post("/api/topics/t/pause", headers=JSON).json()["paused"] is True
    assert client.topic("t", fresh=True).paused
    assert api.post("/api/topics/t/resume", headers=JSON).status_code == 200
    assert not client.topic("t", fresh=True).paused
    assert api.post("/api/topics/t/bindings", json={"group": "audit"}).json()["added"]
    assert not api.post("/api/topics/t/bindings", json={"group": "audit"}).json()["added"]
    assert "invalid group name" in error_of(
        api.post("/api/topics/t/bindings", json={"group": "a b"}), 400)
    assert client.topic("t", fresh=True).bound_groups == ("audit",)
    assert api.delete("/api/topics/t/bindings/audit").json()["removed"]
    assert client.topic("t", fresh=True).bound_groups == ()
    assert "unknown topic 'x'" in error_of(api.post("/api/topics/x/pause", headers=JSON), 404)


def test_an_operator_sets_and_removes_a_groups_limits(api: TestClient,
                                                     client: rmq.Client) -> None:
    client.create_topic("t")
    client.bind("t", "gpu")
    set_ = api.post("/api/topics/t/limits", json={"group": "gpu", "max_in_flight": 4,
                                                   "rate": {"count": 100, "seconds": 60}})
    assert set_.status_code == 200, set_.text
    assert set_.json()["limits"] == {"max_in_flight": 4, "rate": {"count": 100, "seconds": 60},
                                     "max_batches": None}
    assert client.limits("t", "gpu") == rmq.GroupLimits(4, (100, 60))
    groups = {g["group"]: g for g in api.get("/api/topics/t").json()["groups"]}
    assert groups["gpu"]["limits"] == {"max_in_flight": 4,
                                       "rate": {"count": 100, "seconds": 60},
                                       "max_batches": None}
    # a limit left out is kept; one given as null is removed
    assert api.post("/api/topics/t/limits", json={"group": "gpu", "max_batches": 2}
                    ).json()["limits"] == {"max_in_flight": 4,
                                           "rate": {"count": 100, "seconds": 60},
                                           "max_batches": 2}
    assert api.post("/api/topics/t/limits", json={"group": "gpu", "max_in_flight": None}
                    ).json()["limits"] == {"max_in_flight": None,
                                           "rate": {"count": 100, "seconds": 60},
                                           "max_batches": 2}
    assert api.post("/api/topics/t/limits", json={"group": "gpu", "rate": None,
                                                   "max_batches": None}
                    ).json()["limits"] == {"max_in_flight": None, "rate": None,
                                           "max_batches": None}
    assert client.limits("t", "gpu") == rmq.GroupLimits()


def test_limits_of_a_group_that_is_not_bound_are_refused_naming_the_fix(
        api: TestClient, client: rmq.Client) -> None:
    client.create_topic("t")
    client.bind("t", "gpu")
    assert error_of(api.post("/api/topics/t/limits", json={"group": "gpus",
                                                           "max_in_flight": 2}), 400) == (
        "group 'gpus' is not bound to topic 't' (its groups: gpu), so no limit of it would "
        "hold anything: bind it first under Groups on its page, or with POST "
        "/api/topics/t/bindings")
    assert client.limits("t", "gpus") == rmq.GroupLimits()


@pytest.mark.parametrize(("body", "words"), [
    ({"max_in_flight": 0}, "max_in_flight must be an integer from 1 to 1000000, got 0"),
    ({"rate": {"count": 5, "seconds": 0}}, "rate seconds must be a number from 0.001"),
    ({"group": "a b", "max_in_flight": 1}, "invalid group name 'a b'"),
])
def test_bad_limits_are_refused_and_change_nothing(api: TestClient, client: rmq.Client,
                                                   body: dict, words: str) -> None:
    client.create_topic("t")
    client.set_limits("t", max_in_flight=3)
    assert words in error_of(api.post("/api/topics/t/limits", json=body), 400)
    assert client.limits("t") == rmq.GroupLimits(3)


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/api/topics/t/limits", {"max_in_flight": True}, "max_in_flight"),
    ("/api/topics/t/limits", {"rate": {"count": True, "seconds": 60}}, "rate.count"),
    ("/api/topics/t/limits", {"rate": {"count": 5, "seconds": True}}, "rate.seconds"),
    ("/api/topics", {"name": "u", "slots": True}, "slots"),
    ("/api/topics", {"name": "u", "max_retries": False}, "max_retries"),
    ("/api/topics", {"name": "u", "visibility_timeout": True}, "visibility_timeout"),
    ("/api/topics", {"name": "u", "trace_cap": True}, "trace_cap"),
    ("/api/topics/t/messages", {"body": "x", "priority": True}, "priority"),
    ("/api/topics/t/messages", {"body": "x", "delay_ms": True}, "delay_ms"),
    ("/api/topics/t/messages", {"body": "x", "deliver_at": True}, "deliver_at"),
])
def test_a_json_boolean_is_not_taken_for_a_number(api: TestClient, client: rmq.Client,
                                                  path: str, body: dict, field: str) -> None:
    """JSON ``true`` is not 1: a number field given a boolean is refused, naming the field,
    and nothing changes."""
    client.create_topic("t")
    error = error_of(api.post(path, json=body), 422)
    assert error.startswith(f"{field}: Input should be a valid"), error
    assert error.endswith(f"got {json.dumps(body_value(body))}"), error
    assert client.limits("t") == rmq.GroupLimits()
    assert client.topics() == ["t"]
    assert client.stats("t").groups["default"].ready == 0


def body_value(body: dict) -> object:
    """The one boolean in ``body`` (or in its ``rate``)."""
    (value,) = [v for v in [*body.values(), *body.get("rate", {}).values()] if v in (True, False)
                and isinstance(v, bool)]
    return value


def test_send_peek_and_find(api: TestClient, client: rmq.Client) -> None:
    client.create_topic("t", slots=2)
    sent = api.post("/api/topics/t/messages", json={"body": "hello", "priority": 200})
    assert sent.status_code == 201 and sent.json()["merged"] is False
    assert api.post("/api/topics/t/messages", json={"body": "hello"}).json()["merged"]
    api.post("/api/topics/t/messages", json={"body": "later", "delay_ms": 60_000})
    assert "priority must be an integer from 0 to 255" in error_of(
        api.post("/api/topics/t/messages", json={"body": "x", "priority": 999}), 400)
    page = api.get("/api/topics/t/messages", params={"state": "ready"}).json()
    assert page["total"] == 1
    (row,) = page["rows"]
    assert (row["body"], row["priority"], row["attempts"], row["state"]) == (
        "hello", 200, 0, "ready")
    delayed = api.get("/api/topics/t/messages", params={"state": "delayed"}).json()["rows"]
    assert delayed[0]["due_at"] > time.time() * 1000 + 50_000
    found = api.get("/api/topics/t/find", params={"body": "hello"}).json()["rows"]
    assert [(r["group"], r["state"], r["slot"]) for r in found] == [
        ("default", "ready", row["slot"])]
    assert "give a body or a key" in error_of(api.get("/api/topics/t/find"), 400)
    assert "slot must be an integer from 0 to 1" in error_of(
        api.get("/api/topics/t/messages", params={"state": "ready", "slot": 5}), 400)
    assert "state" in error_of(api.get("/api/topics/t/messages", params={"state": "x"}), 422)


def test_the_finder_learns_a_topic_merging_by_key_names_a_message_by_its_key_and_traces_it(
        api: TestClient, client: rmq.Client) -> None:
    client.create_topic("prices", merge="key", trace=True)
    client.create_topic("plain")
    sent = client.send("prices", "price=10", key="product-42")
    client.ack(client.claim("prices"))
    found = api.get("/api/topics/prices/find", params={"key": "product-42"}).json()
    assert found == {"rows": [], "merge": "key"}  # handled: nothing stored, a trace to show
    events = api.get("/api/topics/prices/trace", params={"key": "product-42"}).json()["events"]
    assert [(e["event"], e["message_id"]) for e in events] == [
        ("sent", sent.message_id), ("claimed", sent.message_id), ("acked", sent.message_id)]
    assert api.get("/api/topics/plain/find", params={"key": "k"}).json()["merge"] == "body"


def test_dead_letters_are_requeued_one_some_or_all_and_purged_with_confirmation(
        api: TestClient, client: rmq.Client) -> None:
    client.create_topic("t", slots=2, max_retries=0)
    client.send_many("t", ["a", "b", "c", "d"])
    for message in client.claim("t", count=4):
        client.nack(message, f"failed on {message.text}")
    rows = api.get("/api/topics/t/messages", params={"state": "dead"}).json()["rows"]
    assert {r["error"] for r in rows} == {f"failed on {b}" for b in "abcd"}
    ids = [r["id"] for r in rows]
    assert api.post("/api/topics/t/dead/requeue", json={"ids": ids[:1]}).json() == {
        "requeued": 1}
    assert "not a dead-letter id" in error_of(
        api.post("/api/topics/t/dead/requeue", json={"ids": [ids[1], "9-9"]}), 400)
    assert client.stats("t").groups["default"].dead == 3  # the good id was not requeued
    assert "either ids" in error_of(api.post("/api/topics/t/dead/requeue", json={}), 400)
    assert api.post("/api/topics/t/dead/requeue", json={"ids": ids[1:2]}).json() == {
        "requeued": 1}
    assert "confirm must repeat the topic name" in error_of(
        api.post("/api/topics/t/dead/purge", json={"confirm": "T"}), 400)
    assert client.stats("t").groups["default"].dead == 2
    assert api.post("/api/topics/t/dead/purge", json={"confirm": "t"}).json() == {"purged": 2}
    assert client.stats("t").groups["default"].ready == 2


def test_deleting_a_topic_needs_its_name_again(api: TestClient, client: rmq.Client) -> None:
    client.create_topic("t")
    assert "confirm must repeat" in error_of(api.delete("/api/topics/t?confirm=u"), 400)
    assert client.topics() == ["t"]
    assert api.delete("/api/topics/t?confirm=t").json() == {"deleted": "t"}
    assert client.topics() == []


def test_overview_and_topic_report_what_stats_and_consumers_say(
        api: TestClient, client: rmq.Client) -> None:
    client.create_topic("t", slots=4)
    client.bind("t", "audit")
    client.send_many("t", ["a", "b", "a", {"body": "c", "priority": 250}])
    client.claim("t", "audit", count=1)
    consumer = rmq.Consumer(client, "t", lambda m: None, group="default").start()
    try:
        (topic,) = api.get("/api/overview").json()["topics"]
        stats = client.stats("t")
        groups = {g["group"]: g for g in topic["groups"]}
        assert set(groups) == {"audit", "default"}
        audit = groups["audit"]
        assert audit["backlog"] == {"ready": 2, "delayed": 0, "in_flight": 1, "dead": 0}
        # superseded and cancelled are shown as 0 before they first happen
        assert audit["counters"] == {"superseded": 0, "cancelled": 0,
                                     **stats.groups["audit"].counters}
        assert audit["ready_by_priority"] == {"128": 2}
        assert groups["default"]["consumers_alive"] == 1 and audit["consumers_alive"] == 0
        detail = api.get("/api/topics/t").json()
        assert detail["settings"]["slots"] == 4 and detail["bound_groups"] == ["audit",
                                                                                 "default"]
        cells = detail["heat"]["cells"]
        assert sum(c["ready"] + c["in_flight"] for c in cells) == 3 + sum(
            g.ready + g.in_flight for g in [stats.groups["default"]])
    finally:
        consumer.stop(grace=1)


def test_each_group_reports_the_signals_of_autoscaling_and_each_topic_its_transactions(
        api: TestClient, client: rmq.Client) -> None:
    client.create_topic("t", slots=2)
    client.bind("t", "gpu")
    client.bind("t", "audit", where="region = 'eu'")
    client.set_limits("t", "gpu", max_in_flight=4)
    client.send_many("t", [{"body": f"m{i}", "properties": {"region": "eu" if i < 3 else "us"}}
                           for i in range(5)])
    client.claim("t", "gpu", count=2)
    client.claim("t", "audit", count=3, lease=0.05)  # left to expire
    client.transaction("t", id="order-17").send_many(["a", "b"])
    times = rmq.HandlerTimes((0, 0, 0, 0, 3, 1) + (0,) * 11, 0.6)
    client.heartbeat(ConsumerState("gpu-1", "t", "gpu", "h", 1, client.now(), 4, 2, 4, 0,
                                   times))
    wait_for(lambda: client.stats("t").groups["audit"].expired == 3, 10, "leases to end")
    (topic,) = api.get("/api/overview").json()["topics"]
    groups = {g["group"]: g for g in topic["groups"]}
    assert set(groups) == {"gpu", "audit"}  # default: not bound, holds nothing
    gpu, audit = groups["gpu"], groups["audit"]
    assert (gpu["limit_in_use"], gpu["limits"]["max_in_flight"], gpu["expired"]) == (2, 4, 0)
    assert (audit["limit_in_use"], audit["expired"], audit["backlog"]["in_flight"]) == (
        None, 3, 3)
    assert audit["counters"]["filtered"] == 2
    assert gpu["handler_times"] == {"count": 4, "seconds": 0.6, "mean_seconds": 0.15,
                                    "p50_at_most": 0.1, "p95_at_most": 0.25}
    assert audit["handler_times"] is None
    assert topic["transactions"] == {"open": 1, "halves": 2, "abandoned": 0}
    assert api.get("/api/topics/t").json()["transactions"] == topic["transactions"]
    consumers = api.get("/api/consumers").json()
    assert (consumers["dead_after"], consumers["forgotten_after"]) == (10.0, 600.0)


def test_history_endpoint_serves_the_samples(api: TestClient, client: rmq.Client) -> None:
    client.create_topic("t")
    client.send_many("t", ["a", "b"])
    client.record_history("t")
    data = api.get("/api/topics/t/history", params={"minutes": 5}).json()
    assert data["width_ms"] == 5000
    assert data["groups"]["default"]["backlog_ready"][-1] == 2
    assert "minutes" in error_of(api.get("/api/topics/t/history?minutes=0"), 422)


def test_the_console_works_on_a_cluster_as_on_one_node(redis_url: str) -> None:
    with rmq.Client(redis_url) as c, TestClient(create_app(c, sample_interval=None),
                                                base_url="http://localhost") as http:
        c.create_topic("t", slots=8)
        c.send_many("t", [f"m{i}" for i in range(40)])
        c.record_history("t")
        (topic,) = http.get("/api/overview").json()["topics"]
        assert topic["groups"][0]["backlog"]["ready"] == 40
        page = http.get("/api/topics/t/messages?state=ready&offset=35&limit=10").json()
        assert page["total"] == 40 and len(page["rows"]) == 5
        assert http.get("/api/topics/t/find", params={"body": "m7"}).json()["rows"]


# -- the shaping of data, without Redis ---------------------------------------------------

def sample(at: int, sent: int, rates: bool) -> rmq.HistorySample:
    counters = {"sent": sent, "merged": 0, "acked": 0, "retried": 0, "dead": 0}
    backlog = {"ready": sent, "delayed": 0, "in_flight": 0, "dead": 0}
    return rmq.HistorySample(at, counters, backlog,
                             {k: 1.0 for k in counters} if rates else None, None)


def test_a_gap_in_history_becomes_a_row_of_nulls_so_charts_break_there() -> None:
    history = rmq.TopicHistory("t", 5000, 0, 100_000, {"default": [
        sample(10_000, 1, False), sample(15_000, 2, True), sample(60_000, 3, False),
        sample(65_000, 4, True)]})
    columns = history_series(history)["groups"]["default"]
    assert columns["at"] == [10_000, 15_000, 37_500, 60_000, 65_000]
    assert columns["sent"] == [None, 1.0, None, None, 1.0]
    assert columns["backlog_ready"] == [1, 2, None, 3, 4]


def test_slot_heat_of_1024_slots_is_256_cells_that_keep_every_message() -> None:
    def slot(s: int) -> rmq.SlotStats:
        return rmq.SlotStats(s, 1, s % 7, {}, s % 3, 0, 0, None, {})

    slots = [slot(s) for s in range(1024)]
    group = rmq.GroupStats("default", 1024, sum(s.ready for s in slots), {},
                           sum(s.in_flight for s in slots), 0, 0, {}, slots)
    shown = heat(rmq.TopicStats("t", False, {"default": group}))
    assert len(shown["cells"]) == 256 and shown["slots_per_cell"] == 4
    assert sum(c["ready"] for c in shown["cells"]) == group.ready
    assert sum(c["delayed"] for c in shown["cells"]) == 1024
    assert shown["cells"][-1]["first"] == 1020 and shown["cells"][-1]["last"] == 1023


def test_handled_per_second_comes_from_two_heartbeats() -> None:
    rates = ConsumerRates()

    def beat(at_ms: int, handled: int) -> rmq.ConsumerInfo:
        return rmq.ConsumerInfo("c1", "t", "default", "h", 1, 0, at_ms, 4, 0, handled, 0, True)

    assert rates.rate(beat(100_000, 10)) is None  # one heartbeat: no rate yet
    assert rates.rate(beat(100_000, 10)) is None  # the same one again
    assert rates.rate(beat(102_000, 50)) == pytest.approx(20.0)
    assert rates.rate(beat(102_000, 50)) == pytest.approx(20.0)


def test_in_flight_rows_name_their_holder(api: TestClient, client: rmq.Client) -> None:
    client.create_topic("t", slots=1)
    client.send_many("t", ["mine", "anyone's"])
    client.claim("t", count=1, holder="render-worker-3")
    client.claim("t", count=1)
    rows = api.get("/api/topics/t/messages", params={"state": "in_flight"}).json()["rows"]
    assert {r["body"]: r["holder"] for r in rows} == {"mine": "render-worker-3",
                                                      "anyone's": None}
    (found,) = api.get("/api/topics/t/find", params={"body": "mine"}).json()["rows"]
    assert found["holder"] == "render-worker-3"


def test_api_docs_list_every_endpoint_of_the_openapi_document_from_the_package_alone(
        api: TestClient) -> None:
    page = api.get("/api/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    html = page.text
    assert 'href="/api/openapi.json"' in html
    document = api.get("/api/openapi.json").json()
    rows = re.findall(r'<span class="badge method">(\w+)</span></td><td class="mono">([^<]+)<',
                      html)
    assert sorted(rows) == sorted((method.upper(), path) for path, operations
                                  in document["paths"].items() for method in operations)
    assert "body, priority?, delay_ms?, deliver_at?, key?" in html  # a send: body required
    assert not re.search(r'(src|href)="(https?:)?//', html)  # nothing from a CDN
