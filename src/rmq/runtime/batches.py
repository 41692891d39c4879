"""Batch handlers (docs/semantics.md, "Batch handlers"): a consumer given ``batch=N`` claims
up to N messages at a time and hands them to one handler call as a list.

What is particular to batches lives here: the options' ranges, how many batches a consumer
holds (``BatchRoom``), how a batch's outcome becomes each message's (``outcomes``: returning
acknowledges them all, raising retries them all, ``BatchFailed`` retries those it names),
and waiting for a batch to fill (``Gather``) while its messages stay pending in Redis.
The workers that run batches are ``batch_workers.py``; the fetcher, settler and keeper are
the plain consumer's, which settle, extend and give back messages one by one whatever
batch they came in.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from ..errors import BatchFailed, InvalidArgument
from ..message import Message, Priority
from ..settings import check_int
from .protocol import QueueClient, ReadyWatching
from .threads import log

__all__ = ["BatchRoom", "Gather", "outcomes", "check_batch_options", "MAX_BATCH_WAIT_MS"]

MAX_BATCH_WAIT_MS = 3_600_000  # an hour
LEAD_S = 2.0  # the lease of a group's gathering lead (client/gather_lead.py)
Outcome = tuple[Message, BaseException | str | None]


def check_batch_options(batch: object, batch_wait_ms: object, prefetch: object,
                        most: int) -> None:
    """``batch`` (None, or 1 to ``most`` messages) and ``batch_wait_ms`` (0 to an hour,
    only with a batch) in their ranges, and no ``prefetch`` beside a batch; else
    InvalidArgument naming the option."""
    if batch is None:
        if batch_wait_ms != 0:
            raise InvalidArgument(f"batch_wait_ms applies to batch handlers: give batch=N "
                                  f"too, or leave batch_wait_ms out (got {batch_wait_ms!r})")
        return
    check_int("batch", batch, 1, most, InvalidArgument)
    check_int("batch_wait_ms", batch_wait_ms, 0, MAX_BATCH_WAIT_MS, InvalidArgument)
    if prefetch is not None:
        raise InvalidArgument("prefetch does not apply to a batch consumer: it holds the "
                              "batches its handlers run (concurrency), and one more being "
                              "claimed unless its group has a max_in_flight or max_batches")


class BatchRoom:
    """How many batches a consumer holds (claimed, not yet finished by a handler): at most
    ``concurrency``, one more while the group has no limit in flight (the next batch is
    claimed while the handlers run, so a fast handler never waits for a round trip; under
    a limit it would hold units another consumer's idle handlers could use)."""

    def __init__(self, concurrency: int, size: int):
        self.concurrency, self.size = concurrency, size
        self.capped = False  # the group has a max_in_flight or a max_batches
        self._held = 0
        self._changed = threading.Condition()

    @property
    def limit(self) -> int:
        """The most batches to hold at once now."""
        return self.concurrency + (0 if self.capped else 1)

    def room(self, running: threading.Event) -> int:
        """Wait until a batch may be claimed (or ``running`` clears); returns its size."""
        with self._changed:
            while running.is_set() and self._held >= self.limit:
                self._changed.wait(timeout=1.0)
            return self.size

    def taken(self) -> None:
        with self._changed:
            self._held += 1

    def finished(self, batches: int = 1) -> None:
        """``batches`` held ones were handled, or given back unstarted."""
        with self._changed:
            self._held -= batches
            self._changed.notify_all()

    @property
    def full(self) -> bool:
        """It holds as many batches as it may now."""
        with self._changed:
            return self._held >= self.limit

    def wake_all(self) -> None:
        with self._changed:
            self._changed.notify_all()


def outcomes(batch: Sequence[Message], error: BaseException | None) -> list[Outcome]:
    """Each message's outcome of a handler call on ``batch`` that returned (``error``
    None), raised ``error``, or raised :class:`~rmq.errors.BatchFailed`: the messages it
    names fail with their own error, the rest succeed. A BatchFailed naming anything that
    is not a message of the batch (by itself, its delivery id or its message id) fails the
    whole batch with it: acknowledging messages a typo left out would lose them."""
    if error is None:
        return [(message, None) for message in batch]
    if not isinstance(error, BatchFailed):
        return [(message, error) for message in batch]
    by_name: dict[object, Message] = {}
    for message in batch:
        by_name[message.id] = by_name[message.message_id] = message
    failed: dict[int, BaseException | str] = {}
    for name, cause in error.failures.items():
        named = by_name.get(name.id if isinstance(name, Message) else name)
        if named is None or (isinstance(name, Message) and name != named):
            log.error("a batch handler raised BatchFailed naming %r, which is no message of "
                      "its batch (%s): the whole batch is retried", name,
                      ", ".join(m.id for m in batch))
            return [(message, error) for message in batch]
        failed[id(named)] = cause
    return [(message, failed.get(id(message))) for message in batch]


class Gather:
    """Before a batch consumer claims: while fewer than ``size`` messages are ready, none
    at ``Priority.HIGH`` or above, and the oldest ready one has been due less than
    ``wait_ms``, sleep until that changes (``ReadyWatching.wait``: woken by Redis when a
    key the look read is written, so no polling) and look again. The messages stay
    pending meanwhile, merging with duplicates sent to them.

    One consumer of the group gathers at a time, the one holding the group's lead
    (``ReadyWatching.lead``), so a send costs the group one look however many consumers
    wait; the others sleep on the topic's wake channel until it is handed on (the leader
    has no room for another batch, or stops) or its lease lapses."""

    def __init__(self, client: QueueClient, topic: str, group: str, size: int, wait_ms: int,
                 idle: float, holder: str):
        self.client, self.topic, self.group = client, topic, group
        self.size, self.wait_ms, self.idle, self.holder = size, wait_ms, idle, holder
        self._watch: ReadyWatching | None = None
        self._lead_refused = False  # said once that the lead cannot be had

    def ready(self) -> bool:
        """True: claim now (a full batch is ready, or an urgent message, or the oldest has
        waited long enough; or nothing is ready, and the claim finds that out as an idle
        consumer's does). False: it waited for a change, or for its turn; look again."""
        watch = self._watch = self._watch or self.client.ready_watch(self.topic, self.group)
        try:
            leads = self._leads(watch)
            look = watch.look(self.size, Priority.HIGH) if leads else None
        except Exception as exc:  # noqa: BLE001 - the claim says what is wrong, as it would
            log.debug("batch look of topic %r failed, claiming: %s", self.topic, exc)
            return True
        if look is None:  # another consumer gathers: wait for the lead to come free
            self.client.waiter(self.topic).wait(min(self.idle, LEAD_S / 2))
            return False
        if look.ready >= self.size or look.urgent or look.since is None:
            return True
        now = self.client.now()
        remaining = look.since + self.wait_ms - now
        if remaining <= 0:
            return True
        if look.next_due is not None:  # a delayed message falls due first: it may fill it
            remaining = min(remaining, max(1, look.next_due - now))
        # Back before the lead's lease lapses, to renew it.
        watch.wait(min(remaining / 1000, self.idle, LEAD_S / 2))
        return False

    def _leads(self, watch: ReadyWatching) -> bool:
        """This consumer gathers now; also when the lead cannot be had (an ACL without its
        key, Redis unreachable): then each consumer gathers on its own, as costly as that
        is, said once."""
        try:
            return watch.lead(self.holder, LEAD_S)
        except Exception as exc:  # noqa: BLE001 - gathering alone is still right
            if not self._lead_refused:
                self._lead_refused = True
                log.info("batch consumers of group %r of topic %r gather each on their own: "
                         "the group's lead is refused: %s: %s", self.group, self.topic,
                         type(exc).__name__, exc)
            return True

    def claimed(self, full: bool) -> None:
        """A batch was claimed after ``ready``; ``full``: the consumer has no room for
        another, so the lead goes to one that has."""
        if full and self._watch is not None:
            try:
                self._watch.hand_on()
            except Exception as exc:  # noqa: BLE001 - the others take it when it lapses
                log.debug("handing on the batch lead of topic %r failed: %s", self.topic, exc)

    def interrupt(self) -> None:
        """End a wait under way (from another thread: the consumer stops)."""
        watch = self._watch
        if watch is not None:
            watch.interrupt()

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None
