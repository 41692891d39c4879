"""RMQ on Spark: the ``rmq`` Python data source (Spark 4) and helpers (docs/spark.md).

>>> import rmq.spark
>>> rmq.spark.register(spark)
>>> df.write.format("rmq").option("topic", "renders").mode("append").save()
>>> spark.read.format("rmq").option("topic", "renders").load()            # snapshot
>>> spark.readStream.format("rmq").option("topic", "renders").load()      # at least once
>>> stream_df.writeStream.format("rmq").option("topic", "renders").start()

Options: ``topic`` (required); ``url`` (default ``RMQ_REDIS_URL``, else the embedded server);
``group``; ``batchSize``; ``lease``; ``maxPartitions``; ``recoverInterval``; ``reportPath``.
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from ..message import SendCounts
from .options import InvalidOption
from .rows import READ_SCHEMA, InvalidRow, InvalidSchema
from .session import spark_session
from .source import RMQDataSource
from .workers import WorkersCannotImportRMQ, check_workers

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["register", "publish", "spark_session", "RMQDataSource", "READ_SCHEMA",
           "InvalidOption", "InvalidSchema", "InvalidRow", "WorkersCannotImportRMQ"]

log = logging.getLogger("rmq.spark")


def register(spark: SparkSession) -> None:
    """Make ``format("rmq")`` available in ``spark``; a session that has it already is left
    as it is (registering again would make Spark warn that ``rmq`` replaced itself).

    The first time per Spark application it also runs a one-task job to check that Spark's
    Python workers can import rmq, and raises :class:`WorkersCannotImportRMQ` naming their
    interpreter (``PYSPARK_PYTHON``) if they cannot, instead of the first query failing late.
    """
    check_workers(spark)
    if not _registered(spark):
        spark.dataSource.register(RMQDataSource)


def _registered(spark: SparkSession) -> bool:
    try:
        manager = spark._jsparkSession.sessionState().dataSourceManager()
    except Exception:  # noqa: BLE001 - Spark Connect has no JVM session here: register
        return False
    return bool(manager.dataSourceExists(RMQDataSource.name()))


def publish(df: DataFrame, topic: str, **options: object) -> SendCounts:
    """Write ``df`` into ``topic`` (``df.write.format("rmq")``) and return what was sent,
    how much merged and how much was dropped as outdated, as the driver totalled the tasks'
    reports. ``options`` are the data source's (``url``, ``batchSize``); raises what the
    write raises, nothing sent on a bad option or column."""
    register(df.sparkSession)
    with tempfile.TemporaryDirectory(prefix="rmq-publish-") as scratch:
        report = Path(scratch) / "report.json"
        writer = df.write.format("rmq").mode("append").option("topic", topic)
        for name, value in options.items():
            writer = writer.option(name, str(value))
        writer.option("reportPath", str(report)).save()
        totals = json.loads(report.read_text(encoding="utf-8"))
    counts = SendCounts(totals["sent"], totals["merged"], outdated=totals.get("outdated", 0))
    log.info("published %d rows to %r, %d merged", counts.sent, topic, counts.merged)
    return counts
