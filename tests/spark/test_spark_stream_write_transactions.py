"""A streaming write publishes each micro-batch as one transaction (SPEC §12): a query
killed after its tasks wrote and before Spark's commit, restarted from its checkpoint,
publishes each row once."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from pyspark import cloudpickle

from rmq.spark.source import RMQDataSource
from rmq.spark.writers import TopicStreamWriter

pytestmark = [pytest.mark.extras, pytest.mark.single_node]

# The data source below travels to Spark's Python workers by value (this test module is not
# importable there).
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def marker(topic: str) -> Path:
    """While this file exists, the commit of a write into ``topic`` dies."""
    return Path(tempfile.gettempdir()) / f"rmq-test-commit-dies-{topic}"


class CommitDies(TopicStreamWriter):
    def commit(self, messages: Any, batchId: int) -> None:  # noqa: N803
        if marker(self.options.topic).exists():
            raise RuntimeError("the query dies after its tasks wrote, before Spark's commit")
        super().commit(messages, batchId)


class CommitDiesSource(RMQDataSource):
    """``format("rmq")`` whose streaming commit dies while the marker exists."""

    @classmethod
    def name(cls) -> str:
        return "rmq_commit_dies"

    def streamWriter(self, schema: Any, overwrite: bool) -> CommitDies:
        plain = super().streamWriter(schema, overwrite)
        return CommitDies(plain.url, plain.options)


def test_a_batch_killed_before_spark_s_commit_is_published_once_after_a_restart(
        spark, client, redis_url, tmp_path):
    client.create_topic("published", slots=4)
    source = tmp_path / "in"
    source.mkdir()
    for n in range(2):
        (source / f"part-{n}.json").write_text("".join(
            json.dumps({"body": f"row-{n}-{i}"}) + "\n" for i in range(30)))
    spark.dataSource.register(CommitDiesSource)

    def start(form: str) -> Any:
        rows = (spark.readStream.schema("body STRING").json(str(source))
                .repartition(3, "body"))
        return (rows.writeStream.format(form).option("topic", "published")
                .option("url", redis_url).option("batchSize", "7")
                .option("checkpointLocation", str(tmp_path / "ck"))
                .trigger(availableNow=True).start())

    marker("published").touch()
    try:
        query = start("rmq_commit_dies")
        try:
            query.awaitTermination(120)
        except Exception as exc:  # noqa: BLE001 - the query died, as it should
            assert "before Spark's commit" in str(exc)
        else:
            raise AssertionError("the query's commit did not die")
    finally:
        marker("published").unlink()
    (open_tx,) = client.open_transactions("published")
    assert open_tx.id == f"{query.id}-0" and open_tx.halves == 60
    assert client.claim("published", count=100) == []  # half messages: invisible

    restarted = start("rmq")
    restarted.awaitTermination(120)
    assert restarted.id == query.id  # from the checkpoint: the same transaction id

    bodies = [m.text for m in client.claim("published", count=200)]
    assert sorted(bodies) == sorted(f"row-{n}-{i}" for n in range(2) for i in range(30))
    stats = client.stats("published")
    assert stats.groups["default"].counters["sent"] == 60
    assert (stats.transactions.open, stats.transactions.halves) == (0, 0)
