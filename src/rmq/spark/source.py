"""The ``rmq`` Python data source: which reader or writer each Spark mode gets.

Every mode checks its options, the topic and (for writes) the DataFrame's columns here, on
the driver, while Spark plans the query: a mistake fails the query before a task runs and
before anything is sent.
An RMQ error is raised again from the method Spark called, plainly (see failures.py).
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from ..errors import RMQError
from .clients import client_for, resolve
from .failures import plainly
from .options import InvalidOption, SourceOptions, parse
from .rows import READ_SCHEMA, check_write_schema
from .snapshot_reader import SnapshotReader, plan_snapshot
from .stream_reader import TopicStreamReader
from .writers import TopicStreamWriter, TopicWriter

__all__ = ["RMQDataSource"]


class RMQDataSource(DataSource):
    """``format("rmq")``: batch and streaming reads and writes of one topic (docs/spark.md)."""

    @classmethod
    def name(cls) -> str:
        return "rmq"

    def schema(self) -> StructType:
        return READ_SCHEMA

    def reader(self, schema: StructType) -> SnapshotReader:
        try:
            options = parse(self.options, "read")
            return plan_snapshot(resolve(options.url), options)
        except RMQError as exc:
            raise plainly(exc) from None

    def streamReader(self, schema: StructType) -> TopicStreamReader:
        try:
            return TopicStreamReader(parse(self.options, "stream"))
        except RMQError as exc:
            raise plainly(exc) from None

    def writer(self, schema: StructType, overwrite: bool) -> TopicWriter:
        try:
            url, options = self._checked_write(schema, overwrite)
        except RMQError as exc:
            raise plainly(exc) from None
        return TopicWriter(url, options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> TopicStreamWriter:
        try:
            url, options = self._checked_write(schema, overwrite)
        except RMQError as exc:
            raise plainly(exc) from None
        return TopicStreamWriter(url, options)

    def _checked_write(self, schema: StructType, overwrite: bool) -> tuple[str, SourceOptions]:
        options = parse(self.options, "write")
        if overwrite:
            raise InvalidOption("an rmq topic can only be appended to: use mode('append') "
                                "(or outputMode('append') for a stream)")
        check_write_schema(schema)
        url = resolve(options.url)
        client_for(url, options).topic(options.topic, fresh=True)  # raises UnknownTopic
        return url, options

