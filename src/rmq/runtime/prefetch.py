"""How many messages a consumer holds at once, and how many it claims at a time.

A held message (claimed, running or waiting to start) is in flight: it no longer absorbs
duplicate sends, which is what the founding case needs (a product sent again while its
message is still pending merges into it); a message of higher priority sent meanwhile
starts only after it; and a killed consumer's held messages are handled again. So a
consumer should hold no more than keeps its handlers busy. What that is depends on the
handler: with a 50 ms handler, ``concurrency`` messages plus one waiting keep every worker
busy; with a no-op handler the workers finish a claim long before the next one returns,
and only claims of hundreds of messages keep them fed (a claim's fixed cost, a round trip
and a script call, is then shared by many).

Given a ``prefetch``, a consumer holds at most that (and at least ``concurrency``) and claims
once half of it is free. Without one it adapts, from two measurements:

- the handlers' rate ``R`` = concurrency / the mean time a handler run takes (what the
  workers can finish per second, not what they did: starved workers would understate it);
- the claim's round trip ``H`` (from asking to the answer, Redis and the client both).

While a claim travels the workers finish ``R x H`` messages, so a claim of that many (the
*batch*, at least 1, at most ``MAX_BATCH``) keeps up with them, and twice that held beyond
the running handlers covers one batch waiting to start while the next is claimed. The limit
is ``concurrency + ceil(2 x R x H)``, at most ``concurrency + 2 x MAX_BATCH``:

- a slow handler (50 ms, concurrency 4: R = 80/s; a small claim's H is about a millisecond)
  gets ``concurrency + 1``: one message waits to start, every other stays pending in Redis,
  where duplicates merge into it;
- a no-op handler gets claims of ``MAX_BATCH``, one after another while the workers run the
  previous one, so the claim's round trip overlaps the handling instead of adding to it.
  When Redis is busier, claims take longer and grow, which is when their fixed cost matters.

Large claims take long (a few ms for 500), and a message sent meanwhile waits for the claim
under way and the next one. That matters only where a message can overtake those already
pending, by a higher priority: once a claim brings a higher priority than the claim before
it held, the consumer claims at most ``PRIORITY_BATCH`` at a time from then on, so a
high-priority message sent into a large low-priority backlog starts within a couple of
milliseconds, about as soon as with a fixed prefetch of 2 x concurrency
(bench/priority_under_prefetch.py measures both). A backlog drained highest priority first
keeps the large claims.

A group with a ``max_in_flight`` (docs/limits.md) shares that many deliveries among all its
consumers, and a message held waiting for a worker holds one of them while a worker of
another consumer may be idle. Where handlers are slow (``R x H`` < 1: a claim comes back
before a worker would finish one message) a message held waiting saves its workers less
than one round trip per run: an adaptive prefetch then holds no more than its workers run
(``capped``, which the fetcher sets from the registry entry). Fast handlers keep their
batches, without which a claim's round trip would idle the workers. A ``max_batches``
counts claims, and a message held waiting is a claim held: the same holds for it.

Until the first handler returns nothing is known, and the consumer holds ``concurrency``.
The estimates are moving averages (``_WEIGHT`` per update), so a slow claim now and then or
one long handler run do not swing the limit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..message import Message

__all__ = ["Prefetch", "MAX_BATCH", "PRIORITY_BATCH"]

# Messages an adaptive claim takes at most: two no-op consumers ran fastest with 500 here
# (beside 128 and 256, and a fixed prefetch of 1000; CHANGELOG.md has the figures).
MAX_BATCH = 500
PRIORITY_BATCH = 16  # at most, once higher priorities have come in behind lower ones
_WEIGHT = 0.25  # of each new measurement in the moving averages


class Prefetch:
    """The holding limit of one consumer: ``fixed`` (the user's ``prefetch``), or adaptive
    when None. ``handled`` and ``claimed`` feed the adaptive estimates; the fetcher asks
    ``wanted`` how many to claim."""

    def __init__(self, concurrency: int, fixed: int | None = None):
        self.concurrency = concurrency
        self.fixed = None if fixed is None else max(fixed, concurrency)
        self._handler_seconds: float | None = None  # mean time of one handler run
        self._claim_seconds: float | None = None  # mean round trip of one claim
        self._largest_batch = MAX_BATCH  # PRIORITY_BATCH once priorities overtake
        self._lowest_claimed: int | None = None  # the lowest priority of the last claim
        self.capped = False  # a max_in_flight or max_batches: hold what the workers run

    @property
    def most(self) -> int:
        """The most this consumer ever holds at once."""
        if self.fixed is not None:
            return self.fixed
        return self.concurrency + 2 * MAX_BATCH

    def _in_one_claim(self) -> float:
        """Messages the handlers finish while one claim travels (``R x H``), up to the
        largest batch; 0 until both have been measured."""
        if self._handler_seconds is None or self._claim_seconds is None:
            return 0.0
        if self._handler_seconds <= 0:  # runs too short for the clock to see
            return self._largest_batch
        rate = self.concurrency / self._handler_seconds
        return min(self._largest_batch, rate * self._claim_seconds)

    @property
    def batch(self) -> int:
        """Claim once this many fit (or nothing is held)."""
        if self.fixed is not None:
            return max(1, self.fixed // 2)
        return max(1, math.ceil(self._in_one_claim()))

    @property
    def limit(self) -> int:
        """The most to hold at once now."""
        if self.fixed is not None:
            return self.fixed
        if self._runs_only():
            return self.concurrency
        return self.concurrency + math.ceil(2 * self._in_one_claim())

    def _runs_only(self) -> bool:
        """Hold only what the workers run (module doc: a group with a max_in_flight, or a
        max_batches)."""
        return self.capped and self.fixed is None and self._in_one_claim() < 1

    def wanted(self, held: int) -> int:
        """How many to claim while ``held`` are held; 0: wait until more room is free."""
        limit, batch = self.limit, self.batch
        room = limit - held
        if self._runs_only():
            return max(0, room)  # a worker free: claim for it now
        if room <= 0 or (held and room < batch):
            return 0
        if self.fixed is not None:
            return room  # as many as fit, once half the prefetch is free
        # One batch at a time, so the next claim goes out while the workers run this one;
        # but never fewer than the idle workers (before anything is measured: concurrency).
        return min(room, max(batch, self.concurrency - held))

    def handled(self, seconds: float, runs: int) -> None:
        """``runs`` handler runs (returned or raised) took ``seconds`` in all."""
        if runs:
            self._handler_seconds = _moving(self._handler_seconds, seconds / runs)

    def claimed(self, seconds: float, messages: Sequence[Message]) -> None:
        """A claim took ``seconds`` from asking to its answer, ``messages``."""
        self._claim_seconds = _moving(self._claim_seconds, seconds)
        if not messages:
            return
        priorities = [message.priority for message in messages]
        if self._lowest_claimed is not None and max(priorities) > self._lowest_claimed:
            self._largest_batch = PRIORITY_BATCH
        self._lowest_claimed = min(priorities)


def _moving(average: float | None, sample: float) -> float:
    return sample if average is None else average + _WEIGHT * (sample - average)
