"""RMQ: a Redis message queue that merges duplicate pending messages and serves them by
priority, with delayed and fixed-time delivery and at-least-once consumption."""

from typing import TYPE_CHECKING

from .client import Client, ServerClock, system_clock
from .client.tx_handles import AsyncTransaction, Transaction
from .errors import BatchFailed, RMQError
from .message import DeadLetter, Message, Priority, SendCounts, SendResult, message_id_of
from .settings import GroupLimits, TopicSettings
from .storage.cancel import Cancelled
from .storage.handler_times import HandlerTimes
from .storage.history import HistorySample, TopicHistory
from .storage.isolation import PerTopic
from .storage.peek import PeekPage
from .storage.registry import ConsumerInfo, TopicInfo
from .storage.snapshot import SnapshotRow
from .storage.stats import GroupStats, SlotStats, TopicStats
from .storage.trace import TraceEvent
from .storage.transactions import OpenTransaction, TransactionStats

if TYPE_CHECKING:  # loaded on first use (__getattr__ below); named here for type checkers
    from .client.asynchronous import AsyncClient
    from .runtime import Consumer

__all__ = [
    "Client",
    "AsyncClient",
    "AsyncTransaction",
    "BatchFailed",
    "Cancelled",
    "Consumer",
    "ConsumerInfo",
    "DeadLetter",
    "GroupLimits",
    "GroupStats",
    "HandlerTimes",
    "HistorySample",
    "Message",
    "OpenTransaction",
    "PeekPage",
    "PerTopic",
    "Priority",
    "RMQError",
    "SendCounts",
    "SendResult",
    "ServerClock",
    "SlotStats",
    "SnapshotRow",
    "TopicHistory",
    "TopicInfo",
    "TopicSettings",
    "TopicStats",
    "Transaction",
    "TransactionStats",
    "TraceEvent",
    "message_id_of",
    "system_clock",
]


def __getattr__(name: str) -> object:  # the worker runtime and asyncio client load on first use
    if name == "Consumer":
        from .runtime import Consumer

        return Consumer
    if name == "AsyncClient":
        from .client.asynchronous import AsyncClient

        return AsyncClient
    raise AttributeError(name)
