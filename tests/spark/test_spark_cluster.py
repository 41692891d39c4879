"""The data source unchanged on a Redis Cluster (docs/spark.md): write, snapshot, stream."""

from __future__ import annotations

import pytest

import rmq
import rmq.spark

pytestmark = [pytest.mark.extras, pytest.mark.single_node]


def test_data_source_runs_unchanged_on_a_redis_cluster(spark, cluster_url, tmp_path):
    with rmq.Client(cluster_url) as client:
        client.create_topic("renders", slots=8)
        df = spark.createDataFrame([(f"sku-{i % 40}",) for i in range(400)], "body string")

        counts = rmq.spark.publish(df, "renders", url=cluster_url)

        assert counts == rmq.SendCounts(sent=400, merged=360)
        snapshot = (spark.read.format("rmq").option("topic", "renders")
                    .option("url", cluster_url).load())
        assert snapshot.where("state = 'ready'").count() == 40
        seen: list[str] = []
        query = (spark.readStream.format("rmq").option("topic", "renders")
                 .option("url", cluster_url).load().writeStream
                 .foreachBatch(lambda batch, _: seen.extend(
                     bytes(r.body).decode() for r in batch.collect()))
                 .option("checkpointLocation", str(tmp_path / "ck"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert sorted(seen) == sorted(f"sku-{i}" for i in range(40))
        group = client.stats("renders").groups["default"]
        assert (group.counters["acked"], group.in_flight, group.pending) == (40, 0, 0)
