"""Hearing which deliveries to stop (SPEC §14, docs/semantics.md "Supersede and cancel"): a
send that supersedes a running delivery, or a cancel, marks it in Redis and publishes its
id on the topic's stop channel (``lua/includes/running.lua``); a client that claims from a
topic listens there, on a thread of its own, and hands what it hears to the process's stop
board (``rmq/stops.py``) as hints. A hint counts only for a delivery this process asks
about, and only once Redis confirms it: the watch reads the delivery's mark in its group's
``running`` hash (:meth:`StopWatch.marks`), so a publish that Redis never ordered (any
client allowed to publish on the channel can) stops nothing.

The subscription is confirmed before the client's first claim from the topic returns, so no
delivery it claims can be told to stop unheard. A connection that breaks is opened again
(said once in the log); what was published meanwhile is not heard, and loses nothing: Redis
keeps each delivery's mark, which decides how it settles (dropped, not retried), a lease
extension's reply tells the holder, and the newer message is pending whatever this process
heard. A cluster forwards every PUBLISH to every node, so one connection to any node hears
all.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Sequence
from typing import Any

import redis

from ..errors import RMQError
from ..settings import check_topic_name
from ..stops import BOARD, REASONS, Reason, StopBoard
from ..storage.keys import SlotKeys, stop_channel
from .connect import connect, connect_node
from .error_map import map_errors

__all__ = ["StopWatch"]

log = logging.getLogger("rmq.client")
_READ_S = 1.0  # how long one read waits: how soon a closed watch's thread ends
_REOPEN_S = 1.0  # after a connection broke, the wait before opening it again
_HINT_IDS = 100_000  # ids read of one message on the channel: more is no script's doing


class StopWatch:
    """A client's subscriptions to the stop channels of the topics it claims from, one
    connection and one daemon thread each, read into ``board``."""

    def __init__(self, url: str, redis_options: dict[str, Any],
                 board: StopBoard = BOARD) -> None:
        self._url, self._options, self._board = url, redis_options, board
        self._topics: dict[str, _TopicWatch | None] = {}  # None: it cannot be heard
        self._lock = threading.Lock()
        self._reader: Any = None  # what reads the marks, opened on first use

    def marks(self, topic: str, group: str, slot: int, seqs: Sequence[int]
              ) -> list[Reason | None]:
        """Why Redis told each of these deliveries to stop (its mark in the group's
        ``running`` hash), None where it did not: what makes a hint count. A mark lives
        while its delivery is in flight, and ids never repeat, so a mark names this
        delivery. Redis unreachable: None (the lease extension's reply tells later)."""
        try:
            with self._lock:
                if self._reader is None:
                    self._reader = connect(self._url, **self._options)
                reader = self._reader
            with map_errors():
                found = reader.hmget(SlotKeys(topic, slot).group(group).running,
                                     [f"#{seq}" for seq in seqs])
        except RMQError as exc:
            log.warning("the stop marks of topic %s cannot be read (%s): a delivery told "
                        "to stop learns it at its next lease extension", topic, exc)
            return [None] * len(seqs)
        return [REASONS.get(mark.decode()) if mark else None for mark in found]

    def watching(self, topic: object) -> bool:
        return type(topic) is str and topic in self._topics

    def watch(self, topic: str) -> None:
        """Listen to ``topic``'s stop channel (at once if this client does already);
        returns once the subscription is confirmed. InvalidTopicName for what is no topic
        name (before anything is looked up)."""
        if type(topic) is str and topic in self._topics:
            return
        check_topic_name(topic)
        with self._lock:
            if topic in self._topics:
                return
            try:
                self._topics[topic] = _TopicWatch(self, topic)
            except RMQError as exc:  # an ACL without the channel, Redis unreachable...
                # claims go on unheard: Redis's marks still drop what was told to stop
                log.warning("the stop channel of topic %s cannot be heard (%s): its "
                            "deliveries' superseded stays false", topic, exc)
                self._topics[topic] = None

    def close(self) -> None:
        with self._lock:
            watches, self._topics = list(self._topics.values()), {}
        for watch in watches:
            if watch is not None:
                watch.close()
        with self._lock:
            reader, self._reader = self._reader, None
        if reader is not None:
            with contextlib.suppress(Exception):
                reader.close()


class _TopicWatch:
    def __init__(self, owner: StopWatch, topic: str):
        self._owner, self._topic = owner, topic
        self._url, self._options, self._board = owner._url, owner._options, owner._board
        self._closed = threading.Event()
        self._pubsub = self._subscribe()
        self._thread = threading.Thread(target=self._run, name=f"rmq-stops-{topic}",
                                        daemon=True)
        self._thread.start()

    def _subscribe(self) -> Any:
        pubsub = connect_node(self._url, **self._options).pubsub(
            ignore_subscribe_messages=True)
        with map_errors():
            pubsub.subscribe(stop_channel(self._topic))
            # confirmed: from here on no publish is missed
            pubsub.get_message(timeout=5.0, ignore_subscribe_messages=False)
        return pubsub

    def _run(self) -> None:
        broken = False
        while not self._closed.is_set():
            try:
                if broken:
                    self._pubsub = self._subscribe()
                    log.info("the stop channel of topic %s is heard again", self._topic)
                    broken = False
                message = self._pubsub.get_message(timeout=_READ_S)
            except Exception as exc:  # noqa: BLE001 - what a closing connection raises too
                if self._closed.is_set():
                    return  # closed under the read: redis-py raises what it may then
                if not isinstance(exc, redis.RedisError | OSError | ValueError | TypeError):
                    raise
                if not broken:
                    log.warning("the stop channel of topic %s is not heard (%s); Redis "
                                "still drops each superseded delivery when it settles",
                                self._topic, exc)
                broken = True
                with contextlib.suppress(Exception):
                    self._pubsub.close()
                self._closed.wait(_REOPEN_S)
                continue
            if message is not None and message.get("type") == "message":
                self._told(message["data"])

    def _told(self, data: bytes) -> None:
        try:
            told = json.loads(data)
            ids = told["ids"]
            if not isinstance(ids, list):
                raise TypeError("ids is not a list")
            self._board.hint(self._topic, str(told["generation"]), str(told["group"]),
                             int(told["slot"]), [int(seq) for seq in ids[:_HINT_IDS]],
                             self._owner)
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("an unreadable message on the stop channel of topic %s: %r (%s)",
                        self._topic, data[:200], exc)

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(Exception):
            self._pubsub.close()
