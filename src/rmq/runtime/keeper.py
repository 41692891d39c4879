"""Housekeeping of a running consumer, from one thread: extend the leases of held messages
(so a slow but alive handler is never duplicated), heartbeat into the registry, sample the
topic's history, pick up the topic's settings, and recover expired leases of dead
consumers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..errors import AccessDenied
from ..storage.registry import ConsumerState
from .holdings import Holdings
from .protocol import QueueClient
from .threads import guarded, log, spawn

__all__ = ["Keeper"]


class Keeper:
    """``lease``: the consumer's own lease in seconds, else the topic's visibility timeout;
    every step runs at least every ``heartbeat_interval``, ``recover_interval`` and a third of
    the lease."""

    def __init__(self, client: QueueClient, topic: str, holdings: Holdings, consumer_id: str,
                 report: Callable[[], ConsumerState], stopped: threading.Event, *,
                 lease: float | None, heartbeat_interval: float, recover_interval: float):
        self.client, self.topic, self.holdings = client, topic, holdings
        self.consumer_id, self.report, self.stopped = consumer_id, report, stopped
        self.lease, self.heartbeat_interval = lease, heartbeat_interval
        self.recover_interval = recover_interval
        self._visibility_timeout = 30.0  # the topic's, refreshed whenever the registry answers
        self._samples_history = True  # until the ACL refuses it (a one-topic tenant)
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.heartbeat()
        self.thread = spawn("keeper", self.topic, self._keep_loop)

    def heartbeat(self) -> None:
        state = self.report()
        guarded(self.consumer_id, lambda: self.client.heartbeat(state))

    def _keep_loop(self) -> None:
        # Every step is guarded: an outage longer than the reconnect budget must not end the
        # thread, or nothing would extend, heartbeat or recover once Redis is back.
        last_recover = 0.0
        while not self.stopped.wait(self._interval()):
            extended = self._extend_held()
            self.heartbeat()
            # history for the console, even when none runs: one sample per 5 s, shared
            if self._samples_history:
                guarded(self.consumer_id, self._sample_history)
            # Recover only right after our own leases were extended: after an outage, an
            # extend that failed just before Redis came back would let recovery take back
            # the messages this consumer is still running.
            if extended and time.monotonic() - last_recover >= self.recover_interval:
                last_recover = time.monotonic()
                guarded(self.consumer_id, lambda: self.client.recover(self.topic))

    def _sample_history(self) -> None:
        try:
            self.client.record_history(self.topic)
        except AccessDenied as exc:
            # A one-topic tenant may not write the topic's history (docs/reliability.md,
            # "Security"): a console's own sampler records it; said once, not every round.
            self._samples_history = False
            log.info("%s: this consumer records no history samples (a console does): %s",
                     self.consumer_id, exc)

    def lease_seconds(self) -> float:
        """The lease this consumer's claims and extensions take."""
        if self.lease:
            return self.lease
        info = guarded(self.consumer_id, lambda: self.client.topic(self.topic))
        if info is not None:
            self._visibility_timeout = info.settings.visibility_timeout
        return self._visibility_timeout

    def _interval(self) -> float:
        return min(self.heartbeat_interval, self.recover_interval, self.lease_seconds() / 3)

    def _extend_held(self) -> bool:
        """Extend the leases of held messages; False if Redis could not be asked."""
        held = self.holdings.all()
        if not held:
            return True
        lease, now = self.lease_seconds(), self.client.now()
        kept = guarded(self.consumer_id, lambda: self.client.extend(held, lease))
        if kept is None:
            return False
        # The leases end at least a lease after `now` (the extension's own `now` is later).
        length = int(lease * 1000)
        self.holdings.extended([m for m, ok in zip(held, kept, strict=True) if ok],
                               now + length, length)
        # Settled meanwhile is not lost. Leases lost (this consumer was frozen or cut off):
        # another consumer has these messages now, so the ones not started yet are dropped.
        lost = [m for m, ok in zip(held, kept, strict=True) if not ok and self.holdings.holds(m)]
        self.holdings.forget(lost)
        for message in lost:
            log.warning("%s: lease of %s (message %s) was lost; it will be delivered again",
                        self.consumer_id, message.id, message.message_id)
        return True
