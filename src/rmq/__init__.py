"""RMQ: a Redis message queue that merges duplicate pending messages and serves them by
priority, with delayed and fixed-time delivery and at-least-once consumption."""

from .client import Client, system_clock
from .errors import RMQError
from .message import DeadLetter, Message, Priority, SendCounts, SendResult
from .registry import ConsumerInfo, TopicInfo
from .settings import TopicSettings
from .stats import GroupStats, SlotStats, TopicStats
from .storage.snapshot_ops import SnapshotRow

__all__ = [
    "Client",
    "AsyncClient",
    "Consumer",
    "ConsumerInfo",
    "DeadLetter",
    "GroupStats",
    "Message",
    "Priority",
    "RMQError",
    "SendCounts",
    "SendResult",
    "SlotStats",
    "SnapshotRow",
    "TopicInfo",
    "TopicSettings",
    "TopicStats",
    "system_clock",
]


def __getattr__(name: str):  # the worker runtime and asyncio client load on first use
    if name == "Consumer":
        from .consumer import Consumer

        return Consumer
    if name == "AsyncClient":
        from .aio import AsyncClient

        return AsyncClient
    raise AttributeError(name)
