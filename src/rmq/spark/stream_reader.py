"""``spark.readStream.format("rmq")``: consume a topic at least once, one claim per micro-batch.

Where the work happens. Spark runs a stream reader's planning methods (``latestOffset``,
``partitions``, ``commit``) in one long-lived Python process on the driver, and ``read`` in
the executors. Claiming happens on the driver, in ``latestOffset``: it is the only place
that sees every batch from planning to commit, so it knows exactly which deliveries to
acknowledge, and only there can a claim be tied to an offset before Spark logs it. Tasks
only turn the claimed messages, shipped inside their partitions, into rows: a task Spark
retries reads the same messages again and claims nothing.

Offsets are ``{"batch": n}``, n counting the claims of this query: RMQ's own count, not
Spark's ``batchId`` (Spark numbers every micro-batch it runs, from 0, including batches with
no new data). The logs therefore name offsets as Spark shows them, ``{"batch": n}``, which a
query's progress (``lastProgress``: ``batchId`` with each source's ``startOffset`` and
``endOffset``) and its checkpoint's ``offsets/<batchId>`` files tie to Spark's batch ids. The
driver remembers the deliveries of each claim until Spark has committed the batch that ends
at its offset, then acknowledges them:
when Spark calls ``commit(end)``, or earlier, when it asks ``latestOffset(start)`` for the
next batch (it does so only once the batch ending at ``start`` is committed; this is what
acknowledges the last batch of an ``availableNow`` run and the last one before an idle
spell, which Spark commits without a further ``commit`` call). Until then a keeper thread
extends their leases, so a slow batch is not delivered twice while the query is alive.

If the query dies, nothing is acknowledged: its leases run out and the messages return to
pending (the reader recovers expired leases every ``recoverInterval`` seconds), to be
claimed again, by this query after its restart or by any other consumer of the group. A
batch that Spark replays from the checkpoint after a restart was claimed by the dead driver,
whose memory is gone: it is replayed empty, and its messages arrive in a later batch once
their leases expire. Nothing is lost; a message can be read twice (at least once).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from ..client import Client
from ..errors import RMQError, UnknownTopic
from ..message import Message
from .clients import client_for, resolve
from .failures import plainly
from .options import MAX_CLAIM, SourceOptions
from .rows import delivery_row

__all__ = ["TopicStreamReader"]

log = logging.getLogger("rmq.spark")


# A stream offset: {"batch": N}, the last micro-batch RMQ handed out, stored by Spark as JSON.
Offset = dict[str, Any]


def _shown(offset: Offset) -> str:
    """An offset as Spark shows it in a query's progress and checkpoint (``{"batch": 3}``)."""
    return json.dumps(offset)


def split_by_slot(messages: list[Message], most: int) -> list[InputPartition]:
    """At most ``most`` partitions of rows, the messages of one slot kept together."""
    slots = sorted({m.slot for m in messages})
    if not slots:
        return []
    count = min(most, len(slots))
    place = {slot: i % count for i, slot in enumerate(slots)}
    parts: list[list[tuple[Any, ...]]] = [[] for _ in range(count)]
    for message in messages:
        parts[place[message.slot]].append(delivery_row(message))
    return [InputPartition(rows) for rows in parts]


class TopicStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The streaming read of one topic by one group (see the module doc for the design).

    Spark also builds one of these in each executor, only to call ``read``: nothing connects
    to Redis until a driver-side method runs.
    """

    def __init__(self, options: SourceOptions):
        self.options = options
        self.group = options.group or "default"
        self._held: dict[int, list[Message]] = {}  # batch -> deliveries not yet acknowledged
        self._lock = threading.Lock()
        self._budget: int | None = None  # availableNow: messages still to claim
        self._last_recovery = float("-inf")
        self._lease = 0.0
        self._client: Client | None = None
        self._stopping = threading.Event()

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles a reader to ship ``read`` to executors: only the options travel, the
        # claims (and their locks and threads) never leave the driver.
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Rebuilt as new from its options; mypy refuses calling __init__ on an instance.
        self.__init__(state["options"])  # type: ignore[misc]

    # -- driver side ------------------------------------------------------------------------

    def _connect(self) -> Client:
        if self._client is None:
            client = client_for(resolve(self.options.url), self.options)
            try:
                info = client.topic(self.options.topic, fresh=True)
            except UnknownTopic as exc:
                raise plainly(exc) from None
            # like a Consumer: receive from now on, through the filters the group has
            client.bind(self.options.topic, self.group, keep_filters=True)
            self._lease = self.options.lease or info.settings.visibility_timeout
            self._client = client
            threading.Thread(target=self._keep_leases, name="rmq-spark-lease-keeper",
                             daemon=True).start()
        return self._client

    def initialOffset(self) -> Offset:
        self._connect()
        return {"batch": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.options.batch_size)

    def prepareForTriggerAvailableNow(self) -> None:
        # "Available now" for a queue: what is pending when the query starts. Sends arriving
        # later may be claimed in place of older ones (priority order), never beyond this.
        client = self._connect()
        client.recover(self.options.topic)
        stats = client.stats(self.options.topic).groups.get(self.group)
        self._budget = stats.pending if stats else 0

    def latestOffset(self, start: Offset, limit: ReadLimit) -> Offset:
        client = self._connect()
        done = int(start["batch"])
        self._acknowledge_through(done)
        with self._lock:
            untaken = [batch for batch in self._held if batch > done]
        if untaken:  # handed out before and not planned yet: the same offset again
            return {"batch": max(untaken)}
        self._recover_when_due(client)
        count = self._admitted(limit)
        if count <= 0:
            return start
        messages = client.claim(self.options.topic, self.group, count, lease=self._lease)
        if not messages:
            return start
        if self._budget is not None:
            self._budget -= len(messages)
        with self._lock:
            self._held[done + 1] = messages
        return {"batch": done + 1}

    def partitions(self, start: Offset, end: Offset) -> Sequence[InputPartition]:
        messages: list[Message] = []
        forgotten = []
        for batch in range(int(start["batch"]) + 1, int(end["batch"]) + 1):
            with self._lock:
                held = self._held.get(batch)
            if held is None:
                forgotten.append(batch)
                continue
            messages.extend(held)
        if forgotten:
            log.warning("rmq: topic %r: the micro-batch from offset %s to %s (Spark's "
                        "startOffset and endOffset) holds claims of an earlier run of this "
                        "query (%s); their messages are missing from this batch and are read "
                        "again once their leases expire", self.options.topic, _shown(start),
                        _shown(end), ", ".join(_shown({"batch": b}) for b in forgotten))
        return split_by_slot(messages, self.options.max_partitions)

    def commit(self, end: Offset) -> None:
        self._acknowledge_through(int(end["batch"]))

    def stop(self) -> None:
        """Give back what was claimed and not acknowledged, at once and without counting an
        attempt. Spark does not always call this (never when the driver dies): then the
        leases expire instead."""
        self._stopping.set()
        with self._lock:
            unacknowledged = [m for batch in self._held.values() for m in batch]
            self._held.clear()
            if not unacknowledged or self._client is None:
                return
            try:
                self._client.release(unacknowledged)
            except RMQError as exc:
                log.warning("rmq: could not give back %d claimed messages of topic %r; they "
                            "return when their leases expire: %s", len(unacknowledged),
                            self.options.topic, exc)

    def _admitted(self, limit: ReadLimit) -> int:
        if isinstance(limit, ReadMaxRows):
            count = limit.max_rows
        elif isinstance(limit, ReadAllAvailable):
            count = MAX_CLAIM
        else:
            count = self.options.batch_size
        count = min(count, MAX_CLAIM)
        return count if self._budget is None else min(count, self._budget)

    def _acknowledge_through(self, done: int) -> None:
        with self._lock:
            committed = sorted(batch for batch in self._held if batch <= done)
            messages = [m for batch in committed for m in self._held.pop(batch)]
            if not messages or self._client is None:
                return
            acknowledged = self._client.ack(messages)
        if acknowledged < len(messages):
            log.warning("rmq: topic %r: %d deliveries up to offset %s had lost their lease "
                        "before Spark committed them and will be delivered again",
                        self.options.topic, len(messages) - acknowledged,
                        _shown({"batch": committed[-1]}))

    def _recover_when_due(self, client: Client) -> None:
        now = time.monotonic()
        if now - self._last_recovery >= self.options.recover_interval:
            self._last_recovery = now
            client.recover(self.options.topic)

    def _keep_leases(self) -> None:
        while not self._stopping.wait(self._lease / 3):
            with self._lock:
                held = [m for batch in self._held.values() for m in batch]
                if not held or self._client is None:
                    continue
                try:
                    kept = self._client.extend(held, self._lease)
                except RMQError as exc:
                    log.warning("rmq: could not extend the leases of topic %r: %s",
                                self.options.topic, exc)
                    continue
            lost = len(kept) - sum(kept)
            if lost:
                log.warning("rmq: %d leases of topic %r were lost before Spark committed "
                            "their batch; those messages will be delivered again", lost,
                            self.options.topic)

    # -- executor side ----------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        yield from partition.value
