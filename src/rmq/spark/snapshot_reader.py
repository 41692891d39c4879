"""``spark.read.format("rmq")``: a non-destructive snapshot of a topic, for analytics.

One Spark partition per (group, slot), each read with ``Client.snapshot``: every message the
topic holds, ready, delayed, in flight and dead, with nothing claimed or changed. Each
(group, slot) is read at its own moment, so the whole is not one instant: a message that
changes state meanwhile may show twice or not at all.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from .clients import client_for
from .options import InvalidOption, SourceOptions
from .rows import snapshot_row

__all__ = ["SnapshotReader", "plan_snapshot"]


class SnapshotReader(DataSourceReader):
    """Planned on the driver (:func:`plan_snapshot`); each task reads one (group, slot)."""

    def __init__(self, url: str, topic: str, groups: Sequence[str], slots: int):
        self.url = url
        self.topic = topic
        self.groups = tuple(groups)
        self.slots = slots

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition((group, slot)) for group in self.groups
                for slot in range(self.slots)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        group, slot = partition.value
        client = client_for(self.url)
        for row in client.snapshot(self.topic, groups=[group], slots=[slot]):
            yield snapshot_row(row)


def plan_snapshot(url: str, options: SourceOptions) -> SnapshotReader:
    """Check the topic (and group) and plan the read. Raises UnknownTopic, InvalidOption."""
    client = client_for(url)
    slots = client.topic(options.topic, fresh=True).settings.slots
    groups = sorted(client.stats(options.topic).groups)  # the groups that may hold messages
    if options.group is not None:
        if options.group not in groups:
            raise InvalidOption(f"group {options.group!r} holds nothing on topic "
                                f"{options.topic!r}; its groups are {groups}")
        groups = [options.group]
    return SnapshotReader(url, options.topic, groups, slots)
