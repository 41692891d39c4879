"""The data source's rows: the schema it reads, and the columns it writes.

Reading (batch snapshot and streaming) yields rows of :data:`READ_SCHEMA`; times are Spark
``TIMESTAMP`` values (UTC instants, millisecond precision), bodies and keys ``BINARY``.
Writing takes a DataFrame whose columns are those of ``Client.send``: ``body`` or ``json``,
and optionally ``priority``, ``delay_ms``, ``deliver_at``, ``slot_basis``, ``key``, ``tag``,
``version`` (a topic merging by key: docs/semantics.md, "Versions") and ``properties`` (a
map of string names to one value type, or a struct, whose values are strings, integers,
floats or booleans; a null value is a property not given). The schema is
checked on the driver (:func:`check_write_schema`) before any task runs. Read rows carry
``tag`` and ``properties`` (a JSON object as text, which keeps each value's type; null when
the message has none), and ``message_id`` (``Message.message_id``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from ..errors import InputError
from ..message import Message

if TYPE_CHECKING:
    from .. import SnapshotRow  # the type of Client.snapshot's rows

__all__ = ["READ_SCHEMA", "InvalidSchema", "InvalidRow", "snapshot_row", "delivery_row",
           "check_write_schema", "send_items"]

READ_SCHEMA = (
    StructType()
    .add("topic", StringType(), False)
    .add("group", StringType(), False)
    .add("slot", IntegerType(), False)
    .add("state", StringType(), False)
    .add("priority", IntegerType(), False)
    .add("due_at", TimestampType(), False)
    .add("attempts", IntegerType(), False)
    .add("key", BinaryType(), True)
    .add("body", BinaryType(), False)
    .add("id", StringType(), True)
    .add("lease_until", TimestampType(), True)
    .add("error", StringType(), True)
    .add("dead_at", TimestampType(), True)
    .add("tag", StringType(), True)
    .add("properties", StringType(), True)
    .add("message_id", StringType(), False)
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TEXT = (StringType, BinaryType)
_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)
_WRITE_COLUMNS: dict[str, tuple[tuple[type[DataType], ...], str]] = {
    "body": (_TEXT, "string or binary"),
    "json": ((StringType,), "string (JSON text)"),
    "priority": (_INTEGRAL, "an integer type (0-255)"),
    "delay_ms": (_INTEGRAL + (FloatType, DoubleType), "a number of milliseconds"),
    "deliver_at": ((TimestampType, LongType), "timestamp, or long epoch milliseconds"),
    "slot_basis": (_TEXT, "string or binary"),
    "key": (_TEXT, "string or binary"),
    "tag": ((StringType,), "string"),
    "properties": ((MapType, StructType), "a map of string to one value type, or a struct"),
    "version": (_INTEGRAL, "an integer type (0 to 2**53 - 1)"),
}
_PROPERTY_VALUES = (StringType, BooleanType, FloatType, DoubleType) + _INTEGRAL


class InvalidSchema(InputError):
    """The DataFrame to write lacks a body, or has a column of the wrong name or type."""


class InvalidRow(InputError):
    """A row could not be sent (a null body, malformed JSON, a value ``send`` refuses)."""


def _timestamp(ms: int | None) -> datetime | None:
    return None if ms is None else _EPOCH + timedelta(milliseconds=ms)


def _properties(properties: Mapping[str, Any]) -> str | None:
    return json.dumps(dict(properties), sort_keys=True, ensure_ascii=False) if properties \
        else None


def snapshot_row(row: SnapshotRow) -> tuple[Any, ...]:
    """A ``Client.snapshot`` row as a row of :data:`READ_SCHEMA`."""
    return (row.topic, row.group, row.slot, row.state, row.priority, _timestamp(row.due_at),
            row.attempts, row.key, row.body, row.id, _timestamp(row.lease_until),
            row.error, _timestamp(row.dead_at), row.tag, _properties(row.properties),
            row.message_id)


def delivery_row(message: Message) -> tuple[Any, ...]:
    """A claimed delivery as a row of :data:`READ_SCHEMA` (state ``in_flight``; no
    ``lease_until``: the streaming query keeps extending it until the batch commits)."""
    return (message.topic, message.group, message.slot, "in_flight", message.priority,
            _timestamp(message.due_at), message.attempts, message.key, message.body,
            message.id, None, None, None, message.tag, _properties(message.properties),
            message.message_id)


def check_write_schema(schema: StructType) -> tuple[str, ...]:
    """The columns to send, checked: exactly one of ``body`` / ``json``, every other column
    one of ``Client.send``'s options, each of an accepted type. Raises InvalidSchema."""
    names = [field.name for field in schema.fields]
    unknown = [name for name in names if name not in _WRITE_COLUMNS]
    if unknown:
        raise InvalidSchema(
            f"column(s) {unknown} cannot be written to an rmq topic; the columns are "
            f"{', '.join(_WRITE_COLUMNS)} (select the ones to send)"
        )
    if ("body" in names) == ("json" in names):
        raise InvalidSchema(
            "writing to an rmq topic needs exactly one of the columns 'body' (string or binary) "
            f"and 'json' (JSON text); got columns {names}"
        )
    for field in schema.fields:
        types, wanted = _WRITE_COLUMNS[field.name]
        if isinstance(field.dataType, TimestampNTZType) and field.name == "deliver_at":
            raise InvalidSchema("column 'deliver_at' is TIMESTAMP_NTZ, which names no instant; "
                                "cast it to TIMESTAMP or give epoch milliseconds as a long")
        if not isinstance(field.dataType, types) or (
                field.name == "properties" and not _property_types(field.dataType)):
            raise InvalidSchema(f"column {field.name!r} must be {wanted}, "
                                f"not {field.dataType.simpleString()}")
    return tuple(names)


def _property_types(data_type: DataType) -> bool:
    """Whether a ``properties`` column holds what a property can be: a map from strings to
    strings, integers, floats or booleans, or a struct of fields of those types."""
    if isinstance(data_type, MapType):
        return isinstance(data_type.keyType, StringType) and isinstance(
            data_type.valueType, _PROPERTY_VALUES)
    assert isinstance(data_type, StructType)
    return all(isinstance(f.dataType, _PROPERTY_VALUES) for f in data_type.fields)


def _row_properties(value: Any) -> dict[str, Any]:
    """A ``properties`` cell as Arrow hands it over (a map: a list of (name, value) pairs;
    a struct: a dict) as a dict, without the null values (properties not given)."""
    pairs = value.items() if isinstance(value, dict) else value
    return {name: v for name, v in pairs if v is not None}


def _deliver_at(value: Any) -> Any:
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.astimezone()  # Spark hands TIMESTAMPs over in the local time zone
    return value


def send_items(columns: dict[str, list[Any]], first_row: int) -> Iterator[dict[str, Any]]:
    """``send_many`` items from a column-wise chunk of rows; ``first_row`` numbers the rows
    in errors."""
    names = list(columns)
    for offset, values in enumerate(zip(*columns.values(), strict=True)):
        item = {name: value for name, value in zip(names, values, strict=True)
                if value is not None}
        row = first_row + offset
        if "json" in item:
            try:
                item["json"] = json.loads(item["json"])
            except ValueError as exc:
                raise InvalidRow(f"row {row}: column 'json' is not valid JSON: {exc}") from None
        elif "body" not in item:
            raise InvalidRow(f"row {row}: {'json' if 'json' in names else 'body'} is null")
        if "deliver_at" in item:
            item["deliver_at"] = _deliver_at(item["deliver_at"])
        if "properties" in item:
            item["properties"] = _row_properties(item["properties"]) or None
        yield item
