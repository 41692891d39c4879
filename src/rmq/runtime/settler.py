"""Settling finished messages: acknowledgements in batches, failures one by one (retried or
dead-lettered), each failure logged in one line (with its traceback at the last attempt, or
at DEBUG); giving back messages a worker would not start because their lease (nearly) ran
out; and telling the prefetch how long the handler runs took."""

from __future__ import annotations

import logging
import queue
import threading
from functools import partial
from typing import Any

from ..message import Message
from ..storage.handler_times import HandlerClock
from .holdings import Holdings
from .prefetch import Prefetch
from .protocol import QueueClient
from .threads import guarded, log, spawn
from .workers import Finished

__all__ = ["Settler"]

_STOP: Any = object()
_GIVE_BACK: Any = object()  # in place of a handler's outcome: the message never started
# in place of an error: the item is a batch handler's run, its messages those it acknowledges
_BATCH: Any = object()
_IN_BATCH: Any = object()  # in place of a failed message's seconds: its batch's run counts
MAX_BATCH = 1000  # acknowledgements per round trip


class Settler:
    """Takes each finished message (``finished``) and settles it from its own thread.
    ``handled`` and ``failed`` count the handler's successes and failures (attempts);
    ``failed_messages`` counts the distinct messages among those failures."""

    def __init__(self, client: QueueClient, holdings: Holdings, prefetch: Prefetch,
                 consumer_id: str, topic: str):
        self.client, self.holdings, self.prefetch = client, holdings, prefetch
        self.consumer_id, self.topic = consumer_id, topic
        self.handled = 0
        self.failed = 0
        self.failed_messages = 0
        self.times = HandlerClock()  # how long the handler runs took (heartbeats report it)
        # Messages that failed here and are not settled yet (acked or dead-lettered), as
        # hashes of what identifies a message across deliveries (a retry has a new id):
        # its slot, body and key. A retry of one of them is not a new failed message.
        self._failing: set[int] = set()
        self._finished: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # (message, error, seconds): the handler returned (error None) or raised error on
        # message, after running seconds. The queue's own put: workers call it once a
        # message, and a method around it would cost them a Python call each time.
        self.finished: Finished = self._finished.put
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = spawn("settler", self.topic, self._settle_loop)

    def give_back(self, message: Message) -> None:
        """A worker did not start ``message``: its lease ran out (or nearly) while it waited,
        the consumer having been frozen or cut off. Released, it goes back to pending
        without counting an attempt, unless the lease is gone already (then another consumer
        recovered or took it, and releasing changes nothing)."""
        self._finished.put((message, _GIVE_BACK, 0.0))

    def batch_finished(self, succeeded: list[Message],
                       failures: list[tuple[Message, BaseException | str]],
                       seconds: float) -> None:
        """A batch handler ran ``seconds`` (one run, whatever its size): ``succeeded`` are
        acknowledged together, each of ``failures`` failed with its error."""
        put = self._finished.put
        put((succeeded, _BATCH, seconds))
        for message, error in failures:
            put((message, error, _IN_BATCH))

    def stop(self) -> None:
        """Settle what has finished so far, then exit."""
        self._finished.put(_STOP)

    def _settle_loop(self) -> None:
        finished, observe = self._finished, self.times.observe
        while True:
            batch = [finished.get()]
            while len(batch) < MAX_BATCH:
                try:
                    batch.append(finished.get_nowait())
                except queue.Empty:
                    break
            # One pass sorts the batch (it runs once a message: keep it plain).
            stop = False
            done: list[Message] = []
            succeeded: list[Message] = []
            unstarted: list[Message] = []
            failures: list[tuple[Message, BaseException | str]] = []
            ran, runs = 0.0, 0
            for item in batch:
                if item is _STOP:
                    stop = True
                    continue
                message, error, seconds = item
                if error is None:
                    done.append(message)
                    succeeded.append(message)
                elif error is _GIVE_BACK:
                    done.append(message)
                    unstarted.append(message)
                    continue
                elif error is _BATCH:
                    done += message
                    succeeded += message
                else:
                    done.append(message)
                    failures.append((message, error))
                    if seconds is _IN_BATCH:
                        continue
                ran += seconds
                runs += 1
                observe(seconds)
            self.prefetch.handled(ran, runs)
            # Forget them before settling: the keeper must not extend (and then report as
            # lost) a lease this ack is ending, and the fetcher may claim again meanwhile.
            self.holdings.forget(done)
            if succeeded:
                guarded(self.consumer_id, partial(self.client.ack, succeeded))
                if self._failing:
                    self._failing.difference_update(map(_identity, succeeded))
            if unstarted:
                self._give_back(unstarted)
            for message, error in failures:
                self._fail(message, error)
            self.handled += len(succeeded)
            if stop and finished.empty():
                return

    def _give_back(self, messages: list[Message]) -> None:
        log.warning("%s: did not start %s: the lease ran out (or nearly) while it waited; "
                    "given back, to be delivered again", self.consumer_id,
                    ", ".join(f"{m.id} (message {m.message_id})" for m in messages))
        guarded(self.consumer_id, lambda: self.client.release(messages))

    def _fail(self, message: Message, error: BaseException | str) -> None:
        outcome = guarded(self.consumer_id, lambda: self.client.nack(message, error))
        if outcome in ("superseded", "cancelled"):  # told to stop: not a failure
            log.info("%s: delivery %s (message %s) of topic %r was %s: dropped, not retried "
                     "(%s)", self.consumer_id, message.id, message.message_id, message.topic,
                     outcome, _described(error))
            return
        self.failed += 1
        identity = _identity(message)
        if identity not in self._failing:
            self._failing.add(identity)
            self.failed_messages += 1
        if outcome == "dead":
            self._failing.discard(identity)
            log.error("%s: handler failed on delivery %s (message %s) of topic %r (attempt "
                      "%d, the last): dead-lettered after %d attempts: %s",
                      self.consumer_id, message.id, message.message_id, message.topic,
                      message.attempts, message.attempts, _described(error),
                      exc_info=error if isinstance(error, BaseException) else None)
            return
        # A failure to be retried is one line: a flaky handler must not bury the log in
        # tracebacks (the traceback comes with the last attempt's line, or at DEBUG).
        log.warning("%s: handler failed on delivery %s (message %s) of topic %r (attempt %d), "
                    "to be retried: %s", self.consumer_id, message.id, message.message_id,
                    message.topic, message.attempts, _described(error),
                    exc_info=error if isinstance(error, BaseException)
                    and log.isEnabledFor(logging.DEBUG) else None)


def _described(error: BaseException | str) -> str:
    """A failure as its log line says it: a batch handler's text (``BatchFailed``) as it
    is, an exception as ``Type: message`` (what ``nack`` records of each)."""
    return error if isinstance(error, str) else f"{type(error).__name__}: {error}"


def _identity(message: Message) -> int:
    return hash((message.slot, message.body, message.key))
