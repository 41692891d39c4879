"""A running console samples every topic's throughput history (``Client.record_history``),
so charts fill even when no consumer runs. Several consoles (and the consumers, which
sample too) share the work: each 5-second bucket is taken by one of them."""

from __future__ import annotations

import logging
import threading

import rmq
from rmq.errors import RMQError

__all__ = ["Sampler"]

log = logging.getLogger("rmq.console")


class Sampler:
    """A daemon thread calling ``record_history`` for every topic each ``interval`` s."""

    def __init__(self, client: rmq.Client, interval: float = 2.0):
        self.client = client
        self.interval = interval
        self._stop = threading.Event()
        self._reported: dict[str, str] = {}  # broken topics as last logged, with the problem
        self._thread = threading.Thread(target=self._loop, name="rmq-console-sampler",
                                        daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def sample_all(self) -> None:
        """One round: sample each topic; a broken topic is skipped and samples no other
        topic less. Its problem is logged once: again only when the problem changes, or
        when the topic breaks again after a sample of it went through."""
        found = self.client.each_topic(lambda info: self.client.record_history(info.name))
        for topic, problem in found.broken.items():
            if self._reported.get(topic) != problem:
                log.warning("history sampling skips topic %r: %s", topic, problem)
        # A round that found a bucket already taken (record_history False) read nothing of
        # the topic's keys, so a problem that only a sample meets is not gone: it stays
        # remembered until a sample goes through (True) or the topic is deleted.
        unread = {topic: problem for topic, problem in self._reported.items()
                  if found.results.get(topic) is False}
        self._reported = {**unread, **found.broken}

    def _loop(self) -> None:
        # Whatever one round meets, the thread goes on: a dead sampler would stop every
        # topic's charts for the console's life.
        while not self._stop.is_set():
            try:
                self.sample_all()
            except RMQError as exc:  # Redis away: try again next round
                log.warning("history sampling failed: %s", exc)
            except Exception:
                log.exception("history sampling failed unexpectedly (sampling goes on)")
            self._stop.wait(self.interval)
