"""Prometheus metrics (issue 10, point 4): read at scrape time, in the conventional names and
types, equal to what ``stats()`` and ``consumers()`` say; also served without the UI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from console_helpers import TestClient
from helpers import wait_for
from prometheus_client.parser import text_string_to_metric_families

import rmq
from rmq.server import free_port

pytestmark = pytest.mark.extras


def scrape(text: str) -> dict[str, dict[tuple, float]]:
    """Each sample's value by metric name and sorted label items, checking the types."""
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["rmq_messages_sent"].type == "counter"
    assert families["rmq_messages"].type == "gauge"
    assert families["rmq_oldest_ready_age_seconds"].type == "gauge"
    out: dict[str, dict[tuple, float]] = {}
    for family in families.values():
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def labels(**items: str) -> tuple:
    return tuple(sorted(items.items()))


def fill(client: rmq.Client) -> None:
    client.create_topic("t", slots=4, max_retries=0)
    client.bind("t", "billing")
    client.bind("t", "audit")
    client.send_many("t", ["a", "b", "a", {"body": "c", "priority": 250},
                           {"body": "later", "delay_ms": 60_000}])
    claimed = client.claim("t", "billing", count=2)
    client.nack(claimed[0], "boom")
    client.ack(claimed[1:])
    client.create_topic("paused", slots=1)
    client.pause("paused")


def test_metrics_equal_stats_per_topic_group_state_and_priority(api: TestClient,
                                                                client: rmq.Client) -> None:
    fill(client)
    consumer = rmq.Consumer(client, "paused", lambda m: None, group="default").start()
    try:
        wait_for(lambda: client.consumers("paused"), 10, "the consumer to register")
        samples = scrape(api.get("/metrics").text)
    finally:
        consumer.stop(grace=1)
    stats = client.stats("t")
    for name, group in stats.groups.items():
        for state in ("ready", "delayed", "in_flight", "dead"):
            assert samples["rmq_messages"][labels(topic="t", group=name, state=state)] == (
                getattr(group, state))
        for priority, count in group.ready_by_priority.items():
            assert samples["rmq_ready_messages"][labels(topic="t", group=name,
                                                        priority=str(priority))] == count
        for counter, metric in (("sent", "sent"), ("merged", "merged"), ("acked", "acked"),
                                ("retried", "retried"), ("dead", "dead_lettered")):
            assert samples[f"rmq_messages_{metric}_total"][labels(topic="t", group=name)] == (
                group.counters[counter])
        age = samples["rmq_oldest_ready_age_seconds"][labels(topic="t", group=name)]
        assert abs(age - group.oldest_ready_ms / 1000) < 2
    billing = stats.groups["billing"]
    assert (billing.dead, billing.counters["acked"], billing.counters["merged"]) == (1, 1, 1)
    assert samples["rmq_topic_paused"] == {labels(topic="t"): 0, labels(topic="paused"): 1}
    assert samples["rmq_topic_slots"][labels(topic="t")] == 4
    assert samples["rmq_consumers_alive"][labels(topic="paused", group="default")] == 1
    assert samples["rmq_consumers_alive"][labels(topic="t", group="billing")] == 0


def test_rmq_metrics_serves_the_metrics_without_the_console(console_url: str,
                                                           client: rmq.Client,
                                                           tmp_path: Path) -> None:
    fill(client)
    port = free_port()
    log = open(tmp_path / "metrics.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen([sys.executable, "-m", "rmq", "--url", console_url, "metrics",
                                "--port", str(port)], stdout=log, stderr=subprocess.STDOUT)
    try:
        def scraped() -> str | None:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
            except httpx.HTTPError:
                return None
            return response.text if response.status_code == 200 else None

        text = wait_for(scraped, 30, "rmq metrics to answer")
        samples = scrape(text)
        assert samples["rmq_messages"][labels(topic="t", group="audit", state="ready")] == 3
        assert httpx.get(f"http://127.0.0.1:{port}/").status_code == 404  # no console here
        client.send("t", "one more")  # read at scrape time: the next scrape sees it
        again = scrape(httpx.get(f"http://127.0.0.1:{port}/metrics").text)
        assert again["rmq_messages"][labels(topic="t", group="audit", state="ready")] == 4
    finally:
        process.terminate()
        process.wait(timeout=15)
        log.close()
    assert "RMQ metrics: http://127.0.0.1" in (tmp_path / "metrics.log").read_text()
