"""Streaming reads of a topic: ``spark.readStream.format("rmq")``, at least once (SPEC §6).

The sinks are ``foreachBatch`` functions running in this process, so a test can record what
reached the sink and make a batch fail as a crashed job would.
"""

from __future__ import annotations

import threading
import time

import pytest
from helpers import wait_for

pytestmark = [pytest.mark.extras, pytest.mark.single_node]


class RecordingSink:
    """Records (body, attempts) of every row that reached it; raises on ``fail_on`` batches
    before recording anything, like a job dying mid-batch."""

    def __init__(self, fail_on: tuple[int, ...] = (), slow_batches: float = 0.0):
        self.rows: list[tuple[str, int]] = []
        self.batches: list[int] = []
        self.fail_on = fail_on
        self.slow_batches = slow_batches
        self.lock = threading.Lock()

    def __call__(self, df, batch_id: int) -> None:
        if batch_id in self.fail_on:
            raise RuntimeError(f"sink crashed in batch {batch_id}")
        rows = [(bytes(r.body).decode(), r.attempts) for r in df.collect()]
        if self.slow_batches:
            time.sleep(self.slow_batches)  # a batch that outlives its lease
        with self.lock:
            self.rows += rows
            self.batches.append(batch_id)

    def bodies(self) -> set[str]:
        with self.lock:
            return {body for body, _ in self.rows}


def stream(spark, redis_url, topic, sink, checkpoint, trigger, **options):
    reader = spark.readStream.format("rmq").option("topic", topic).option("url", redis_url)
    for name, value in options.items():
        reader = reader.option(name, str(value))
    return (reader.load().writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint)).trigger(**trigger).start())


def test_stream_read_delivers_each_message_once_and_acknowledges_when_spark_commits(
        spark, client, redis_url, tmp_path):
    client.create_topic("jobs", slots=4)
    client.send_many("jobs", [f"job-{i}" for i in range(100)])
    sink = RecordingSink()

    query = stream(spark, redis_url, "jobs", sink, tmp_path / "ck", {"availableNow": True},
                   batchSize=40)
    query.awaitTermination(120)

    assert sorted(sink.rows) == sorted((f"job-{i}", 1) for i in range(100))
    assert len(sink.batches) == 3
    group = client.stats("jobs").groups["default"]
    assert (group.counters["acked"], group.in_flight, group.pending) == (100, 0, 0)
    # RMQ's logs name offsets as Spark shows them; its progress pairs each batch id with one.
    assert [(p["batchId"], p["sources"][0]["endOffset"]) for p in query.recentProgress] == [
        (0, '{"batch": 1}'), (1, '{"batch": 2}'), (2, '{"batch": 3}')]


def test_a_batch_slower_than_its_lease_is_not_delivered_twice(spark, client, redis_url,
                                                             tmp_path):
    client.create_topic("slow", visibility_timeout=1)
    client.send_many("slow", [f"render-{i}" for i in range(10)])
    sink = RecordingSink(slow_batches=2.5)

    query = stream(spark, redis_url, "slow", sink, tmp_path / "ck", {"availableNow": True},
                   lease=1, recoverInterval=0.2)
    query.awaitTermination(120)

    assert sorted(sink.rows) == sorted((f"render-{i}", 1) for i in range(10))
    group = client.stats("slow").groups["default"]
    assert (group.counters["acked"], group.counters["retried"]) == (10, 0)


def test_stream_read_killed_mid_way_loses_nothing_after_restart_from_its_checkpoint(
        spark, client, redis_url, tmp_path):
    client.create_topic("renders", slots=4)
    everything = {f"sku-{i}" for i in range(100)}
    client.send_many("renders", sorted(everything))
    checkpoint = tmp_path / "ck"
    options = {"batchSize": 30, "lease": 2, "recoverInterval": 0.5}

    crashing = RecordingSink(fail_on=(1,))
    first = stream(spark, redis_url, "renders", crashing, checkpoint, {"availableNow": True},
                   **options)
    with pytest.raises(Exception, match="sink crashed in batch 1"):
        first.awaitTermination(120)
    assert len(crashing.bodies()) == 30
    assert client.stats("renders").groups["default"].counters["acked"] == 30

    sink = RecordingSink()
    second = stream(spark, redis_url, "renders", sink, checkpoint,
                    {"processingTime": "0.2 seconds"}, **options)
    try:
        wait_for(lambda: crashing.bodies() | sink.bodies() == everything, timeout=120,
                 what="every message to reach a sink")
        wait_for(lambda: client.stats("renders").groups["default"].counters["acked"] == 100,
                 timeout=30, what="every delivery to be acknowledged")
    finally:
        second.stop()

    assert crashing.bodies().isdisjoint(sink.bodies())
    replayed = [attempts for _, attempts in sink.rows if attempts > 1]
    assert len(replayed) <= 30  # only the crashed batch's messages came round again
    group = client.stats("renders").groups["default"]
    assert (group.in_flight, group.pending) == (0, 0)


def test_stream_read_of_an_unknown_topic_fails_the_query(spark, redis_url, tmp_path):
    query = stream(spark, redis_url, "nowhere", RecordingSink(), tmp_path / "ck",
                   {"availableNow": True})
    with pytest.raises(Exception, match="unknown topic 'nowhere': create it with `rmq topic "
                                        "create nowhere`"):
        query.awaitTermination(120)
