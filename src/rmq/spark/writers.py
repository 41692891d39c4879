"""Writing DataFrames into a topic: the batch writer and the streaming writer.

Each Spark task sends its partition with ``Client.send_many`` in chunks of ``batchSize`` rows
(one pipelined round trip per chunk on a single node) and returns a :class:`SendReport` of
what it sent and how much merged. Spark hands the reports of all tasks to ``commit`` on the
driver, which logs the totals and, when the ``reportPath`` option names a file, records them
there (``rmq.spark.publish`` uses that to return the counts).

A batch write's sends are not transactional across chunks: a task that fails midway has
sent its earlier chunks, and a retried task sends them again, which merges while they are
still pending. A streaming write publishes each micro-batch as one transaction (SPEC §12,
docs/transactions.md): its id is the query's id and the batch id, each task sends its rows as
half messages under a part of its own (its partition), and ``commit`` on the driver commits
the transaction once Spark commits the batch. A batch Spark runs again (after a failure, or
a restart from the checkpoint) sends under the same id and parts: what a part stored before
is not stored again, and a batch committed before stores nothing: each row is published once.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from ..errors import InputError, TransactionClosed
from .clients import client_for
from .options import SourceOptions
from .rows import InvalidRow, send_items

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["SendReport", "TopicWriter", "TopicStreamWriter", "total"]

log = logging.getLogger("rmq.spark")


@dataclass(frozen=True)
class SendReport(WriterCommitMessage):
    """One task's outcome: rows sent, how many of them merged into pending messages, and
    how many were dropped as older than their key's version (a streaming task: rows stored
    as half messages, and its batch's transaction id)."""

    sent: int
    merged: int
    transaction: str | None = None
    outdated: int = 0


def total(messages: list[WriterCommitMessage | None]) -> SendReport:
    """The sum of the reports of the tasks that finished (a failed task reports None)."""
    reports = [m for m in messages if isinstance(m, SendReport)]
    return SendReport(sum(r.sent for r in reports), sum(r.merged for r in reports),
                      outdated=sum(r.outdated for r in reports))


def _chunks(batches: Iterator[pa.RecordBatch], size: int
            ) -> Iterator[tuple[int, int, list[dict[str, Any]]]]:
    """A partition's rows, ``size`` at a time, as send items: per chunk, the number of its
    first row in the partition, how many rows it holds, and the items (raises InvalidRow
    naming a bad row)."""
    row = 0
    for batch in batches:
        for start in range(0, batch.num_rows, size):
            chunk = batch.slice(start, size)
            columns = {name: chunk.column(name).to_pylist() for name in chunk.schema.names}
            yield row, chunk.num_rows, list(send_items(columns, row))
            row += chunk.num_rows


def send_partition(url: str, options: SourceOptions,
                   batches: Iterator[pa.RecordBatch]) -> SendReport:
    """Send every row of one partition, ``batch_size`` rows per ``send_many`` call."""
    client = client_for(url, options)
    sent = merged = outdated = 0
    for row, rows, items in _chunks(batches, options.batch_size):
        try:
            counts = client.send_many(options.topic, items)
        except InputError as exc:
            raise InvalidRow(
                f"rows {row}-{row + rows - 1} of this partition were refused "
                f"(the {sent} rows before them were sent): {exc}"
            ) from None
        sent += counts.sent
        merged += counts.merged
        outdated += counts.outdated
    return SendReport(sent, merged, outdated=outdated)


def micro_batch_id() -> tuple[str, int]:
    """On an executor: (the transaction id of this task's micro-batch, the partition), from
    the local properties Spark gives the tasks of a streaming query: its query id (kept in
    the checkpoint, so a restart keeps it) and batch id."""
    from pyspark import TaskContext

    context = TaskContext.get()
    query = context.getLocalProperty("sql.streaming.queryId") if context else None
    batch = context.getLocalProperty("streaming.sql.batchId") if context else None
    if context is None or not query or batch is None:
        raise RuntimeError("a streaming write's task runs without its query and batch ids")
    return f"{query}-{batch}", context.partitionId()


def send_halves(url: str, options: SourceOptions,
                batches: Iterator[pa.RecordBatch]) -> SendReport:
    """Send every row of one partition of a micro-batch as half messages of the batch's
    transaction, under the partition's part; a batch committed before stores nothing."""
    client = client_for(url, options)
    tx_id, partition = micro_batch_id()
    tx = client.transaction(options.topic, tx_id, part=f"p{partition}")
    sent = 0
    for row, rows, items in _chunks(batches, options.batch_size):
        try:
            sent += tx.send_many(items)
        except TransactionClosed:  # published before: Spark runs the batch again
            return SendReport(0, 0, tx_id)
        except InputError as exc:
            raise InvalidRow(
                f"rows {row}-{row + rows - 1} of this partition were refused "
                f"(the {sent} rows before them were stored, uncommitted): {exc}"
            ) from None
    return SendReport(sent, 0, tx_id)


def _record(path: str, entry: dict[str, object], *, append: bool) -> None:
    target = Path(path)
    line = json.dumps(entry, sort_keys=True)
    if append:
        with target.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
        return
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    partial.write_text(line + "\n", encoding="utf-8")
    partial.replace(target)


class TopicWriter(DataSourceArrowWriter):
    """``df.write.format("rmq")``: created and checked on the driver, run by each task."""

    def __init__(self, url: str, options: SourceOptions):
        self.url = url
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SendReport:
        return send_partition(self.url, self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        done = total(messages)
        log.info("rmq: sent %d rows to topic %r, %d merged, %d outdated", done.sent,
                 self.options.topic, done.merged, done.outdated)
        if self.options.report_path:
            _record(self.options.report_path,
                    {"topic": self.options.topic, "partitions": len(messages),
                     "sent": done.sent, "merged": done.merged, "outdated": done.outdated},
                    append=False)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        done = total(messages)
        log.warning("rmq: write to topic %r failed; the tasks that finished had sent %d rows "
                    "(%d merged), and the failed ones part of theirs", self.options.topic,
                    done.sent, done.merged)


class TopicStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("rmq")``: each micro-batch is one transaction, committed when
    Spark commits the batch. A batch Spark runs again after a failure publishes each row
    once (module docstring)."""

    def __init__(self, url: str, options: SourceOptions):
        self.url = url
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SendReport:
        return send_halves(self.url, self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        ids = {m.transaction for m in messages if isinstance(m, SendReport) and m.transaction}
        client = client_for(self.url, self.options)
        counts = [client.transaction(self.options.topic, tx_id).commit() for tx_id in ids]
        # a handle that sent nothing commits every slot: the tasks' halves, whichever run
        # of the batch stored them
        done = SendReport(sum(c.sent for c in counts), sum(c.merged for c in counts))
        log.info("rmq: micro-batch %d sent %d rows to topic %r, %d merged", batchId, done.sent,
                 self.options.topic, done.merged)
        if self.options.report_path:
            _record(self.options.report_path,
                    {"topic": self.options.topic, "batch": batchId, "sent": done.sent,
                     "merged": done.merged}, append=True)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        # The transaction stays open: Spark runs the batch again (now, or when the query
        # restarts from its checkpoint), and that run commits it.
        done = total(messages)
        log.warning("rmq: micro-batch %d to topic %r failed after storing %d rows, "
                    "uncommitted until Spark runs it again", batchId, self.options.topic,
                    done.sent)
