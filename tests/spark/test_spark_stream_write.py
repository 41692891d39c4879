"""Streaming writes into a topic: ``writeStream.format("rmq")`` (SPEC §6)."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.extras, pytest.mark.single_node]


def test_stream_write_publishes_every_micro_batch(spark, client, redis_url, tmp_path):
    """A pipeline from one topic to another: what a streaming read claims is sent on."""
    client.create_topic("changes", slots=2)
    client.create_topic("renders", slots=2)
    client.send_many("changes", [f"sku-{i % 25}:{i}" for i in range(60)])
    report = tmp_path / "report.jsonl"
    products = (spark.readStream.format("rmq").option("topic", "changes")
                .option("url", redis_url).option("batchSize", "20").load()
                .selectExpr("substring_index(cast(body as string), ':', 1) AS body",
                            "priority"))

    query = (products.writeStream.format("rmq").option("topic", "renders")
             .option("url", redis_url).option("reportPath", str(report))
             .option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)

    lines = [json.loads(line) for line in report.read_text().splitlines()]
    # each line as docs/spark.md documents it
    assert all(set(line) == {"topic", "batch", "sent", "merged"} for line in lines)
    assert sum(line["sent"] for line in lines) == 60
    renders = client.stats("renders").groups["default"]
    assert renders.counters["sent"] == 60
    assert renders.counters["merged"] == sum(line["merged"] for line in lines)
    assert renders.ready == 25
    assert client.stats("changes").groups["default"].counters["acked"] == 60


def test_stream_write_without_a_body_fails_at_start_and_sends_nothing(spark, client,
                                                                     redis_url, tmp_path):
    client.create_topic("renders")
    source = (spark.readStream.format("rate").option("rowsPerSecond", "10").load()
              .selectExpr("CAST(value % 200 AS int) AS priority"))

    with pytest.raises(Exception, match="exactly one of the columns 'body'"):
        query = (source.writeStream.format("rmq").option("topic", "renders")
                 .option("url", redis_url)
                 .option("checkpointLocation", str(tmp_path / "ck")).start())
        query.awaitTermination(60)

    assert client.stats("renders").groups["default"].counters["sent"] == 0
