"""Hearing which deliveries to stop (SPEC §14, docs/semantics.md "Supersede and cancel"): a
send that supersedes a running delivery, or a cancel, publishes its id on the topic's stop
channel (``lua/includes/running.lua``); a client that claims from a topic listens there, on
a thread of its own, and marks what it hears on the process's stop board (``rmq/stops.py``),
which ``Message.superseded`` reads.

The subscription is confirmed before the client's first claim from the topic returns, so no
delivery it claims can be told to stop unheard. A connection that breaks is opened again
(said once in the log); what was published meanwhile is not heard, and loses nothing: Redis
keeps each delivery's mark, which decides how it settles (dropped, not retried), and the
newer message is pending whatever this process heard. A cluster forwards every PUBLISH to
every node, so one connection to any node hears all.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from typing import Any

import redis

from ..errors import RMQError
from ..settings import check_topic_name
from ..stops import BOARD, StopBoard
from ..storage.keys import stop_channel
from .connect import connect_node
from .error_map import map_errors

__all__ = ["StopWatch"]

log = logging.getLogger("rmq.client")
_READ_S = 1.0  # how long one read waits: how soon a closed watch's thread ends
_REOPEN_S = 1.0  # after a connection broke, the wait before opening it again


class StopWatch:
    """A client's subscriptions to the stop channels of the topics it claims from, one
    connection and one daemon thread each, read into ``board``."""

    def __init__(self, url: str, redis_options: dict[str, Any],
                 board: StopBoard = BOARD) -> None:
        self._url, self._options, self._board = url, redis_options, board
        self._topics: dict[str, _TopicWatch | None] = {}  # None: it cannot be heard
        self._lock = threading.Lock()

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
                self._topics[topic] = _TopicWatch(self._url, self._options, topic, self._board)
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


class _TopicWatch:
    def __init__(self, url: str, options: dict[str, Any], topic: str, board: StopBoard):
        self._url, self._options, self._topic, self._board = url, options, topic, board
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
            except (redis.RedisError, OSError, ValueError, TypeError) as exc:
                if self._closed.is_set():
                    return
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
            self._board.mark(self._topic, str(told["generation"]), str(told["group"]),
                             int(told["slot"]), [int(seq) for seq in told["ids"]],
                             str(told["reason"]))
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("an unreadable message on the stop channel of topic %s: %r (%s)",
                        self._topic, data[:200], exc)

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(Exception):
            self._pubsub.close()
