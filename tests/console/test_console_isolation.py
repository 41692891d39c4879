"""Isolation in the console (SPEC §7): one topic whose registry entry is broken in any way
(tests/broken_topics.py) is shown as broken with what is wrong, and every other topic is
served as usual by the API, the pages, /metrics and the history sampler; the console judges
consumers' heartbeats by the queue's clock, not its host's."""

from __future__ import annotations

import html
import logging
import re
import time

import pytest
from broken_topics import BREAKAGES, break_topic
from console_helpers import TestClient
from helpers import wait_for
from prometheus_client.parser import text_string_to_metric_families

import rmq
from rmq.console import create_app
from rmq.console.sampler import Sampler
from rmq.storage.keys import RegistryKeys, SlotKeys
from rmq.storage.registry import ConsumerState

pytestmark = pytest.mark.extras

KINDS = sorted(BREAKAGES)
LOCAL = "http://127.0.0.1:8270"


def state(topic: str, now: int) -> ConsumerState:
    return ConsumerState(f"{topic}-worker", topic, "default", "host", 1, now, 2, 0, 5, 0)


@pytest.fixture(params=KINDS)
def broken(request: pytest.FixtureRequest, client: rmq.Client) -> str:
    """A healthy topic "good" (a message, a consumer) beside "broken", broken in one way;
    the kind of breakage."""
    client.create_topic("good", slots=2)
    client.send("good", b"work")
    client.heartbeat(state("good", client.now()))
    client.create_topic("broken")
    client.heartbeat(state("broken", client.now()))
    break_topic(client.redis, "broken", request.param)
    return str(request.param)


def test_the_overview_serves_the_other_topics_and_names_the_broken_one(api: TestClient,
                                                                       broken: str) -> None:
    answer = api.get("/api/overview")
    assert answer.status_code == 200, answer.text
    data = answer.json()
    assert [t["name"] for t in data["topics"]] == ["good"]
    assert data["topics"][0]["groups"][0]["backlog"]["ready"] == 1
    (entry,) = data["broken"]
    assert entry["name"] == "broken" and BREAKAGES[broken] in entry["problem"]


def test_the_consumers_list_serves_the_other_topics_and_names_the_broken_one(
        api: TestClient, broken: str) -> None:
    answer = api.get("/api/consumers")
    assert answer.status_code == 200, answer.text
    data = answer.json()
    assert [c["id"] for c in data["consumers"]] == ["good-worker"]
    (entry,) = data["broken"]
    assert entry["name"] == "broken" and BREAKAGES[broken] in entry["problem"]


def test_metrics_serve_the_other_topics_and_flag_the_broken_one(api: TestClient,
                                                                broken: str) -> None:
    answer = api.get("/metrics")
    assert answer.status_code == 200, answer.text
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(answer.text)
               for s in family.samples}
    assert samples[("rmq_messages", (("group", "default"), ("state", "ready"),
                                     ("topic", "good")))] == 1
    assert samples[("rmq_topic_broken", (("topic", "broken"),))] == 1
    assert samples[("rmq_topic_broken", (("topic", "good"),))] == 0
    assert not [key for key in samples if ("topic", "broken") in key[1]
                and key[0] != "rmq_topic_broken"]


def test_pages_offer_only_readable_topics_and_a_broken_one_says_what_is_wrong(
        api: TestClient, broken: str) -> None:
    assert api.get("/").status_code == 200
    for page in ("/consumers", "/dead", "/find"):  # each offers a topic to pick
        answer = api.get(page)
        assert answer.status_code == 200, (page, answer.text)
        offered = re.findall(r'<option value="([^"]*)"', answer.text)
        assert "good" in offered and "broken" not in offered
    gone = broken == "no settings"  # the entry's one proof of existence is missing
    detail = api.get("/api/topics/broken")
    assert detail.status_code == (404 if gone else 409)
    assert "'broken'" in detail.json()["error"]
    page = api.get("/topics/broken")
    assert page.status_code == (404 if gone else 409)
    if not gone:
        assert BREAKAGES[broken] in html.unescape(page.text)


def test_heartbeats_of_the_wrong_redis_type_break_only_their_topic(api: TestClient,
                                                                    client: rmq.Client) -> None:
    client.create_topic("good")
    client.heartbeat(state("good", client.now()))
    client.create_topic("broken")
    client.redis.set(RegistryKeys("broken").consumers, b"not a hash")
    for path in ("/api/overview", "/api/consumers"):
        data = api.get(path).json()
        assert data["broken"] == [{"name": "broken", "problem": data["broken"][0]["problem"]}]
        assert "another Redis type" in data["broken"][0]["problem"]
    assert [c["id"] for c in data["consumers"]] == ["good-worker"]
    assert 'rmq_topic_broken{topic="broken"} 1.0' in api.get("/metrics").text


def test_the_history_sampler_survives_and_keeps_sampling_the_other_topics(
        client: rmq.Client, broken: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="rmq.console")

    def warned(topic: str) -> bool:
        return any(f"topic {topic!r}" in r.getMessage() for r in caplog.records)

    sampler = Sampler(client, interval=0.02).start()
    try:
        wait_for(lambda: warned("broken"), 10, "the sampler to name the broken topic")
        wait_for(lambda: client.history("good", minutes=5).groups.get("default"), 10,
                 "a sample of the healthy topic")
        # a later round meets a second broken topic: the thread went on after the first
        client.create_topic("later")
        break_topic(client.redis, "later", broken)
        wait_for(lambda: warned("later"), 10, "the sampler's next rounds")
        assert sampler._thread.is_alive()
    finally:
        sampler.stop()
    (first,) = [r.getMessage() for r in caplog.records if "topic 'broken'" in r.getMessage()]
    assert BREAKAGES[broken] in first  # said once, not every round


def sampling_warnings(caplog: pytest.LogCaptureFixture, topic: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.getMessage().startswith(f"history sampling skips topic {topic!r}")]


def test_the_sampler_logs_a_topics_problem_once_until_it_changes_or_is_fixed(
        client: rmq.Client, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="rmq.console")
    client.create_topic("good")
    client.create_topic("broken", slots=1)
    counters = SlotKeys("broken", 0).group("default").counters
    sampler = Sampler(client, interval=60)

    def rounds(count: int) -> None:
        for _ in range(count):
            # each round in a bucket of its own (one is 5 s wide): forgetting the bucket
            # the last round took lets this one sample the topic again at once
            client.redis.delete(RegistryKeys("broken").history)
            sampler.sample_all()
            sampler.sample_all()  # the same bucket again: taken, so not sampled

    client.redis.set(counters, b"another program's")
    rounds(4)
    (first,) = sampling_warnings(caplog, "broken")
    assert "another Redis type" in first
    client.redis.delete(counters)  # fixed: the next sample goes through
    rounds(2)
    assert len(sampling_warnings(caplog, "broken")) == 1
    client.redis.set(counters, b"another program's")  # broken again: said again, once
    rounds(3)
    assert sampling_warnings(caplog, "broken") == [first, first]
    break_topic(client.redis, "broken", "settings not JSON")  # another problem: said
    rounds(3)
    *_, changed = sampling_warnings(caplog, "broken")
    assert len(sampling_warnings(caplog, "broken")) == 3
    assert BREAKAGES["settings not JSON"] in changed
    assert client.history("good", minutes=5).groups.get("default")


@pytest.mark.parametrize("path", ["/api/topics/broken",
                                  "/api/topics/broken/messages?state=ready",
                                  "/api/topics/broken/find?body=x"])
def test_a_conflict_from_a_broken_topic_names_the_topic(api: TestClient, client: rmq.Client,
                                                        path: str) -> None:
    client.create_topic("broken", slots=1)
    keys = SlotKeys("broken", 0).group("default")
    client.redis.set(keys.counters, b"another program's")
    client.redis.set(keys.ready, b"another program's")
    answer = api.get(path)
    assert answer.status_code == 409, answer.text
    error = answer.json()["error"]
    assert error.startswith("topic 'broken': ") and "another Redis type" in error, error


def test_a_heartbeat_age_is_judged_by_the_queues_clock_not_the_console_hosts(
        console_url: str) -> None:
    # The queue's clock (Redis's, or the one the clients are given) a minute behind this
    # host's: a consumer that has just beaten is not a minute silent.
    def behind() -> int:
        return time.time_ns() // 1_000_000 - 60_000

    with rmq.Client(console_url, clock=behind) as client, TestClient(
            create_app(client, sample_interval=None), base_url=LOCAL) as api:
        client.create_topic("jobs")
        client.heartbeat(state("jobs", client.now()))
        data = api.get("/api/consumers").json()
    (consumer,) = data["consumers"]
    assert consumer["alive"] is True
    assert consumer["seconds_since_heartbeat"] < 5
    assert abs(data["now"] - consumer["last_seen"]) < 5  # what the page counts "up for" from
