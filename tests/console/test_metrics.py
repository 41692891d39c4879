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
from rmq.storage.registry import ConsumerState

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


def test_metrics_carry_the_signals_an_autoscaler_reads(api: TestClient,
                                                      client: rmq.Client) -> None:
    client.create_topic("renders", slots=2)
    client.bind("renders", "gpu")
    client.bind("renders", "audit")
    client.set_limits("renders", "gpu", max_in_flight=4)
    client.send_many("renders", [f"sku-{i}" for i in range(6)])
    client.claim("renders", "gpu", count=3)
    client.claim("renders", "audit", count=2, lease=0.05)  # its consumer died: left to expire
    times = rmq.HandlerTimes((1, 0, 0, 0, 2) + (0,) * 12, 0.25)
    client.heartbeat(ConsumerState("gpu-1", "renders", "gpu", "h", 1, client.now(), 4, 3, 3, 0,
                                   times))
    client.heartbeat(ConsumerState("gpu-2", "renders", "gpu", "h", 2, client.now(), 2, 0, 0, 0))
    wait_for(lambda: client.stats("renders").groups["audit"].expired == 2, 10, "leases to end")
    families = {f.name: f for f in text_string_to_metric_families(api.get("/metrics").text)}
    assert families["rmq_handler_seconds"].type == "histogram"
    samples = scrape(api.get("/metrics").text)
    gpu, audit = labels(topic="renders", group="gpu"), labels(topic="renders", group="audit")
    assert samples["rmq_messages_expired"] == {gpu: 0, audit: 2,
                                               labels(topic="renders", group="default"): 0}
    assert samples["rmq_messages"][labels(topic="renders", group="audit",
                                          state="in_flight")] == 2
    assert samples["rmq_in_flight_limit"] == {gpu: 4}  # only the limited group has one
    assert samples["rmq_in_flight_limit_used"] == {gpu: 3}
    assert samples["rmq_consumers_concurrency"][gpu] == 6
    # one histogram per group: its consumers' added up (gpu-2 reported no run)
    assert samples["rmq_handler_seconds_count"] == {gpu: 3}
    assert samples["rmq_handler_seconds_sum"][gpu] == 0.25
    buckets = {dict(k)["le"]: v for k, v in samples["rmq_handler_seconds_bucket"].items()}
    assert all(dict(k).keys() == {"topic", "group", "le"}
               for k in samples["rmq_handler_seconds_bucket"])
    assert (buckets["0.005"], buckets["0.05"], buckets["0.1"], buckets["+Inf"]) == (1, 1, 3, 3)
    assert len(buckets) == len(rmq.HandlerTimes().counts)


def handler_series(api: TestClient) -> dict[str, dict[tuple, float]]:
    samples = scrape(api.get("/metrics").text)
    return {name: samples.get(name, {}) for name in (
        "rmq_handler_seconds_bucket", "rmq_handler_seconds_count", "rmq_handler_seconds_sum")}


def test_handler_time_series_do_not_grow_with_consumers(api: TestClient,
                                                        client: rmq.Client) -> None:
    client.create_topic("renders", slots=1)
    client.bind("renders", "gpu")
    one_run = rmq.HandlerTimes((0, 1) + (0,) * 15, 0.01)
    for n in range(300):
        client.heartbeat(ConsumerState(f"gpu-{n}", "renders", "gpu", "h", n, client.now(), 1,
                                       0, 1, 0, one_run))
    series = handler_series(api)
    gpu = labels(topic="renders", group="gpu")
    assert series["rmq_handler_seconds_count"] == {gpu: 300}
    assert series["rmq_handler_seconds_sum"] == {gpu: pytest.approx(3.0)}
    assert len(series["rmq_handler_seconds_bucket"]) == len(rmq.HandlerTimes().counts)


def test_handler_time_keeps_the_runs_of_consumers_gone_since_the_last_scrape(
        api: TestClient, client: rmq.Client) -> None:
    """A sum of consumers' histograms would fall when one is forgotten, which rate() reads
    as a reset; the group's series only grows."""
    client.create_topic("renders", slots=1)
    client.bind("renders", "gpu")

    def beat(consumer: str, runs: int) -> None:
        client.heartbeat(ConsumerState(consumer, "renders", "gpu", "h", 1, client.now(), 1, 0,
                                       runs, 0, rmq.HandlerTimes((runs,) + (0,) * 16,
                                                                 runs / 1000)))

    gpu = labels(topic="renders", group="gpu")
    beat("gpu-1", 5)
    beat("gpu-2", 3)
    assert handler_series(api)["rmq_handler_seconds_count"] == {gpu: 8}
    client.forget_consumer("renders", "gpu-1")  # stopped, or silent for 10 minutes
    beat("gpu-2", 4)
    assert handler_series(api)["rmq_handler_seconds_count"] == {gpu: 9}
    beat("gpu-2", 1)  # a record counting from zero again (the same id restarted)
    beat("gpu-3", 2)
    series = handler_series(api)
    assert series["rmq_handler_seconds_count"] == {gpu: 12}
    assert series["rmq_handler_seconds_sum"] == {gpu: pytest.approx(0.012)}
    assert series["rmq_handler_seconds_bucket"][
        labels(topic="renders", group="gpu", le="+Inf")] == 12
    client.delete_topic("renders")  # a topic gone ends its series
    assert handler_series(api)["rmq_handler_seconds_count"] == {}


def test_metrics_show_every_limit_of_a_group(api: TestClient, client: rmq.Client) -> None:
    client.create_topic("renders", slots=1)
    for group in ("gpu", "mail", "free"):
        client.bind("renders", group)
    client.set_limits("renders", "gpu", max_batches=4, max_in_flight=64)
    client.set_limits("renders", "mail", rate=(50, 0.5))
    client.send_many("renders", [f"sku-{i}" for i in range(10)])
    client.claim("renders", "gpu", count=3)
    client.claim("renders", "gpu", count=3)
    samples = scrape(api.get("/metrics").text)
    gpu, mail = labels(topic="renders", group="gpu"), labels(topic="renders", group="mail")
    assert samples["rmq_batches_limit"] == {gpu: 4}
    assert samples["rmq_batches_limit_used"] == {gpu: 2}  # two claims in flight
    assert samples["rmq_in_flight_limit"] == {gpu: 64}
    assert samples["rmq_in_flight_limit_used"] == {gpu: 6}
    assert samples["rmq_rate_limit_messages"] == {mail: 50}
    assert samples["rmq_rate_limit_window_seconds"] == {mail: 0.5}


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


def test_outdated_sends_are_counted_in_the_metrics_and_the_topic_view(api: TestClient,
                                                                       client: rmq.Client
                                                                       ) -> None:
    client.create_topic("prices", merge="key")
    client.send("prices", "v5", key="p", version=5)
    client.send("prices", "v3", key="p", version=3)
    samples = scrape(api.get("/metrics").text)
    assert samples["rmq_messages_outdated_total"][labels(topic="prices", group="default")] == 1
    (group,) = api.get("/api/topics/prices").json()["groups"]
    assert group["counters"]["outdated"] == 1
    sent = api.post("/api/topics/prices/messages", json={"body": "v4", "key": "p", "version": 4})
    assert sent.json()["outdated"] is True
