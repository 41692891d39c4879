"""The fault scenarios behind ``python -m chaos`` and ``tests/faults``.

Each one injects real faults into real processes (consumer processes SIGKILLed or SIGSTOPped,
Redis SIGKILLed and restarted, the network cut by a TCP proxy), lets the system recover by
itself, and ends with a :class:`~chaos.ledger.Ledger` plus the figures that matter for
it (duplicates and their bound, recovery times). A scenario never asserts: it returns an
:class:`Outcome` whose ``problems`` say what broke a promise, so the test suite and the
command line judge the same way.
"""

from __future__ import annotations

import contextlib
import random
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmq.client import Client, ServerClock
from rmq.server import RedisServer, wait_until

from .fleet import Fleet, stopping_fleets
from .ledger import Ledger, account
from .producer import Producer
from .proxy import TcpProxy

__all__ = ["Stage", "Outcome", "outages", "worker_kills", "redis_restarts", "network_cuts",
           "slow_handler", "frozen_consumer", "poison_messages", "clock_skew", "SEND_BOUND"]

LEASE = 2.0  # seconds: short, so a dead consumer's messages come back quickly
# A send may take the client's whole reconnect budget (about 10 s) plus a restart.
SEND_BOUND = 15.0


@dataclass
class Stage:
    """Where a scenario runs: a Redis URL (single node or cluster), a directory for worker
    logs, a seeded random source, the server itself when the scenario kills it, and the
    slot count of the topics it creates."""

    url: str
    workdir: Path
    rng: random.Random = field(default_factory=random.Random)
    server: RedisServer | None = None
    slots: int = 8  # the scenarios' topics' (more than 16: a single node's heads index)


@dataclass
class Outcome:
    """What a scenario observed. ``problems`` is empty when every promise held."""

    name: str
    ledger: Ledger
    figures: dict[str, Any]
    problems: list[str]
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.problems

    def report(self) -> str:
        figures = ", ".join(f"{k} {_fmt(v)}" for k, v in self.figures.items())
        verdict = "ok" if self.ok else "FAILED: " + "; ".join(self.problems)
        return (f"{self.name} ({self.seconds:.1f} s): {verdict}\n  ledger: {self.ledger.line()}"
                f"\n  figures: {figures}")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, list):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return str(value)


def _bodies(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i:07d}".encode() for i in range(n)]


def _preload(client: Client, topic: str, bodies: Sequence[bytes]) -> None:
    for start in range(0, len(bodies), 1000):
        client.send_many(topic, bodies[start : start + 1000])


def _totals(client: Client, topic: str) -> tuple[int, int]:
    """(pending, in flight) of the default group."""
    group = client.stats(topic).groups.get("default")
    return (group.pending, group.in_flight) if group else (0, 0)


def _drain_timeout(size: int) -> float:
    return 30.0 + size / 200


def _wait_drained(client: Client, topic: str, size: int, problems: list[str]) -> None:
    """Wait until nothing is pending or in flight; if that never happens, say so in
    ``problems`` (the ledger then shows where the messages are stuck)."""
    try:
        wait_until(lambda: _totals(client, topic) == (0, 0), _drain_timeout(size),
                   "every message to be acknowledged", interval=0.05)
    except TimeoutError as exc:
        pending, in_flight = _totals(client, topic)
        problems.append(f"{exc}: {pending} pending and {in_flight} in flight remain")


def _close_out(name: str, started: float, client: Client, topic: str, fleet: Fleet,
               sent: Sequence[bytes], figures: dict[str, Any], problems: list[str],
               uncertain: Sequence[bytes] = (), tolerate_missing: bool = False) -> Outcome:
    """Stop the workers, draw up the ledger, and add the problems every scenario shares
    (``tolerate_missing`` leaves judging missing messages to the caller)."""
    fleet.stop()
    ledger = account(client, topic, sent, fleet.handled(), uncertain=uncertain)
    client.close()
    if (ledger.missing and not tolerate_missing) or ledger.unexpected:
        problems.append(f"ledger does not balance: {ledger.examples}")
    if not ledger.stats_agree:
        problems.append("stats() and snapshot() disagree about the topic")
    if problems:
        problems.append("worker logs:\n" + fleet.errors())
    return Outcome(name, ledger, figures, problems, time.monotonic() - started)


def _timed(condition: Callable[[], Any], timeout: float, what: str) -> float | None:
    """Seconds until ``condition`` holds, or None if it did not within ``timeout``."""
    began = time.monotonic()
    with contextlib.suppress(TimeoutError):
        wait_until(condition, timeout, what)
        return time.monotonic() - began
    return None


@stopping_fleets
def worker_kills(stage: Stage, size: int = 2000, kills: int = 5, workers: int = 3,
                 work_ms: float = 20.0, batch: int | None = None,
                 batch_wait_ms: int = 0, max_batches: int | None = None) -> Outcome:
    """Consumer processes SIGKILLed at random points of the run, each replaced at once.
    Nothing may be lost; duplicates may not exceed what the killed workers held (their
    prefetch, plus the batch whose acknowledgement was on its way: at most twice the prefetch)
    at the moment they died. ``work_ms`` (each handling's duration) sets the pace:
    the run must outlast the kills for them to land mid-run. With ``batch`` the workers
    run batch handlers of that many (``batch_wait_ms`` as their wait to fill one), each
    holding at most its batches, full; ``max_batches`` limits the group's batches in flight,
    whose units a killed worker gives back with its leases."""
    started, topic = time.monotonic(), "chaos-kills" if batch is None else "chaos-batch-kills"
    client = Client(stage.url, registry_ttl=0.5)
    client.create_topic(topic, slots=stage.slots, visibility_timeout=LEASE, retry_backoff=0)
    if max_batches is not None:
        client.set_limits(topic, max_batches=max_batches)
    # A fixed prefetch keeps the bound tight: the adaptive default holds about concurrency + 1
    # at this pace, but may hold up to concurrency + 1000 for a fast handler.
    fleet = Fleet(stage.workdir / ("kills" if batch is None else "batch-kills"), stage.url,
                  topic, concurrency=4, prefetch=8 if batch is None else None,
                  work_ms=work_ms, batch=batch,
                  batch_wait_ms=None if batch is None else batch_wait_ms)
    for _ in range(workers):
        fleet.spawn()
    sent = _bodies("kill", size)
    _preload(client, topic, sent)
    marks = sorted(int(stage.rng.uniform(0.05, 0.85) * size) for _ in range(kills))
    in_flight_at_kill, bound = [], 0

    def handled(count: int) -> Callable[[], bool]:
        return lambda: fleet.handlings() >= count

    for mark in marks:
        wait_until(handled(mark), _drain_timeout(size), f"{mark} handlings", interval=0.005)
        victim = stage.rng.choice(fleet.alive())
        in_flight_at_kill.append(_totals(client, topic)[1])
        victim.kill()
        bound += 2 * victim.prefetch  # held, plus one batch being acknowledged
        fleet.spawn()
    problems: list[str] = []
    _wait_drained(client, topic, size, problems)
    attempts = fleet.handled().attempts.values()
    figures: dict[str, Any] = {"kills": kills, "kill_points": marks,
                               "in_flight_at_kills": in_flight_at_kill,
                               "redelivered": sum(1 for a in attempts if max(a) > 1),
                               "duplicate_bound": bound}
    outcome = _close_out("worker-kills" if batch is None else "batch-worker-kills", started,
                         client, topic, fleet, sent, figures, problems)
    if outcome.ledger.duplicates > bound:
        outcome.problems.append(f"{outcome.ledger.duplicates} duplicates exceed the bound "
                                f"{bound} (what the killed workers held)")
    if outcome.ledger.acknowledged != size:
        outcome.problems.append("not every message was acknowledged")
    return outcome


@stopping_fleets
def outages(stage: Stage, name: str, size: int, url: str, control_url: str,
            faults: Sequence[tuple[Callable[[], None], Callable[[], None]]],
            batch: int, tolerate_missing: bool = False,
            after_create: Callable[[], None] | None = None) -> Outcome:
    """Producer and consumer processes on ``url`` while each fault of ``faults`` (an
    (inject, repair) pair) strikes at a random point of the sending; measures how long
    sending and consuming take to resume after each repair. ``after_create`` runs once the
    topic is created, before anything else (the failover scenario waits there for the
    replicas to hold the topic's registry entry)."""
    started, topic = time.monotonic(), f"chaos-{name}"
    client = Client(control_url, registry_ttl=0.5)

    def acked() -> int:
        return client.stats(topic).groups["default"].counters["acked"]

    client.create_topic(topic, slots=stage.slots, visibility_timeout=LEASE, retry_backoff=0)
    if after_create is not None:
        after_create()
    fleet = Fleet(stage.workdir / name, url, topic, concurrency=4, work_ms=1.0)
    for _ in range(2):
        fleet.spawn()
    producer = Producer(url, topic, _bodies(name, size), batch=batch)
    producer.start()
    marks = sorted(int(stage.rng.uniform(0.1, 0.8) * size) for _ in faults)
    send_back, consume_back, outage = [], [], []

    def sent(count: int) -> Callable[[], bool]:
        return lambda: producer.done >= count or not producer.is_alive()

    def sending_since(moment: float) -> Callable[[], object]:
        return lambda: producer.successes_after(moment) or not producer.is_alive()

    def acked_beyond(count: int) -> Callable[[], bool]:
        # or all was acknowledged by the repair: nothing is left to resume (as sending_since
        # takes a producer that is done); a short run can finish while a failover is repaired
        return lambda: count >= size or acked() > count

    for mark, (inject, repair) in zip(marks, faults, strict=True):
        wait_until(sent(mark), _drain_timeout(size), f"{mark} sends")
        struck = time.monotonic()
        inject()
        repair()
        repaired = time.monotonic()
        outage.append(repaired - struck)
        acked_then = acked()
        send_back.append(_timed(sending_since(repaired), SEND_BOUND, "a send"))
        consume_back.append(_timed(acked_beyond(acked_then), SEND_BOUND, "an acknowledgement"))
    producer.join(_drain_timeout(size))
    problems = [f"a send raised something other than RedisUnavailable: {e}"
                for e in producer.other_errors[:5]]
    _wait_drained(client, topic, size, problems)
    if producer.slowest > SEND_BOUND:
        problems.append(f"a send blocked {producer.slowest:.1f} s (bound {SEND_BOUND} s)")
    dead = [w.pid for w in fleet.workers if not w.alive]
    if dead:
        problems.append(f"consumer processes {dead} died instead of reconnecting")
    if None in send_back or None in consume_back:
        problems.append("sending or consuming did not resume by itself")
    figures = {"faults": len(faults), "outage_s": outage, "send_resumed_s": send_back,
               "consume_resumed_s": consume_back, "slowest_send_s": producer.slowest,
               "uncertain_sends": len(producer.uncertain)}
    return _close_out(name, started, client, topic, fleet, producer.sent, figures, problems,
                      producer.uncertain, tolerate_missing)


def redis_restarts(stage: Stage, size: int = 3000, restarts: int = 2, down: float = 1.0,
                   batch: int = 1) -> Outcome:
    """Redis SIGKILLed and restarted (same port and data) while producers send and consumers
    consume. Under ``appendfsync always`` no acknowledged send and no unacknowledged delivery
    may be lost; producers get RedisUnavailable or succeed within SEND_BOUND; consumers and
    producers reconnect by themselves. Redis stays down ``down`` seconds each time."""
    server = stage.server
    if server is None:
        raise ValueError("redis_restarts needs the server it may kill (Stage.server)")

    def crash() -> None:
        server.kill()
        time.sleep(down)  # how long Redis stays dead, not a wait for anything

    def come_back() -> None:
        server.start()

    outcome = outages(stage, "restarts", size, server.url, server.url,
                       [(crash, come_back)] * restarts, batch)
    with server.client() as direct:
        outcome.figures["appendfsync"] = direct.config_get("appendfsync")["appendfsync"]
    return outcome


def network_cuts(stage: Stage, size: int = 3000, outage: float = 1.5,
                 batch: int = 1) -> Outcome:
    """Clients reach Redis through a TCP proxy that is cut twice, once resetting every
    connection and once silently stalling them, for ``outage`` seconds each."""
    server = stage.server
    if server is None:
        raise ValueError("network_cuts needs a single server to put the proxy in front of")
    proxy = TcpProxy(server.port)

    def cut(mode: str) -> Callable[[], None]:
        def inject() -> None:
            proxy.cut(mode)
            time.sleep(outage)  # the partition's length, not a wait for anything
        return inject

    try:
        outcome = outages(stage, "network", size, proxy.url, server.url,
                           [(cut("reset"), proxy.restore), (cut("stall"), proxy.restore)],
                           batch)
    finally:
        proxy.close()
    outcome.figures["proxy_connections"] = proxy.connections
    return outcome


@stopping_fleets
def slow_handler(stage: Stage, messages: int = 8, lease: float = 1.0,
                 work: float = 3.5) -> Outcome:
    """Handlers that take ``work`` seconds, longer than their ``lease``, in live processes:
    the lease is extended, so no message is delivered twice."""
    started, topic = time.monotonic(), "chaos-slow"
    client = Client(stage.url, registry_ttl=0.5)
    client.create_topic(topic, slots=stage.slots, visibility_timeout=lease, retry_backoff=0)
    fleet = Fleet(stage.workdir / "slow", stage.url, topic, concurrency=4, lease=lease,
                  work_ms=work * 1000)
    for _ in range(2):
        fleet.spawn()
    sent = _bodies("slow", messages)
    _preload(client, topic, sent)
    problems: list[str] = []
    _wait_drained(client, topic, messages, problems)
    retried = client.stats(topic).groups["default"].counters["retried"]
    outcome = _close_out("slow-handler", started, client, topic, fleet, sent,
                         {"lease_s": lease, "handler_s": work, "retried": retried}, problems)
    handled = fleet.handled()
    redelivered = sorted(b.decode() for b, a in handled.attempts.items() if a != [1])
    if outcome.ledger.duplicates or redelivered or retried:
        outcome.problems.append(f"a live slow handler's message was delivered again: "
                                f"{redelivered}, retried counter {retried}")
    return outcome


@stopping_fleets
def frozen_consumer(stage: Stage, messages: int = 12, lease: float = 1.5) -> Outcome:
    """A consumer process frozen with SIGSTOP while it holds messages: they are delivered to
    another consumer once their lease (as last extended) runs out, not before. Thawed at the
    end, the frozen one finishes only the handlers it was running, starts none of the
    messages it held unstarted (their leases are gone), and its late acknowledgements change
    nothing."""
    started, topic = time.monotonic(), "chaos-frozen"
    client = Client(stage.url, registry_ttl=0.5)
    client.create_topic(topic, slots=stage.slots, visibility_timeout=lease, retry_backoff=0)
    fleet = Fleet(stage.workdir / "frozen", stage.url, topic, lease=lease)
    running = 2  # handlers the frozen consumer runs at once
    frozen = fleet.spawn(concurrency=running, prefetch=4 * running, work_ms=300)
    sent = _bodies("frozen", messages)
    _preload(client, topic, sent)
    wait_until(lambda: fleet.handlings() >= 2, 30, "the first consumer to get going")
    frozen.signal(signal.SIGSTOP)
    stopped, frozen_at = time.monotonic(), client.now() / 1000
    rows = [row for row in client.snapshot(topic) if row.state == "in_flight"]
    held = {row.body for row in rows}
    # Leases run from the last claim or extension, so the freeze may find them part-used.
    expiry_ms = min((row.lease_until or 0 for row in rows), default=0)
    fleet.spawn(concurrency=4)

    def redelivered() -> bool:
        attempts = fleet.handled().attempts
        return any(max(attempts.get(body, [0])) >= 2 for body in held)

    wait_until(redelivered, lease + 30, "a frozen consumer's message to be redelivered")
    redelivered_after, seen_ms = time.monotonic() - stopped, client.now()
    problems: list[str] = []
    _wait_drained(client, topic, messages, problems)
    handled_before_thaw = frozen.handlings()  # its log cannot grow while it is stopped
    frozen.signal(signal.SIGCONT)
    thawed_at = client.now()
    # Its first heartbeat after the thaw holding nothing: the keeper has run, and anything
    # the workers started meanwhile is on record by the time the fleet stops.
    if _timed(lambda: _holds_nothing_since(client, topic, frozen.pid, thawed_at), 30,
              "the thawed consumer to report in") is None:
        problems.append("the thawed consumer never reported holding nothing")
    figures = {"lease_s": lease, "held_when_frozen": len(held),
               "lease_left_when_frozen_s": expiry_ms / 1000 - frozen_at,
               "first_redelivery_s": redelivered_after, "duplicate_bound": len(held)}
    outcome = _close_out("frozen-consumer", started, client, topic, fleet, sent, figures,
                         problems)
    after_thaw = frozen.handlings() - handled_before_thaw
    outcome.figures["handled_after_thaw"] = after_thaw
    if after_thaw > running:
        outcome.problems.append(f"the thawed consumer handled {after_thaw} messages, more "
                                f"than the {running} it was running when frozen: it started "
                                "messages whose lease it had lost")
    if not held:
        outcome.problems.append("the frozen consumer held nothing: nothing was tested")
    if seen_ms < expiry_ms:
        outcome.problems.append(f"redelivered {expiry_ms - seen_ms:.0f} ms before the lease "
                                "ran out")
    # In flight under it when frozen: its prefetch, plus the batch it had finished and was
    # acknowledging (the settler frees room before the ack's round trip).
    if len(held) > 2 * frozen.prefetch:
        outcome.problems.append(f"{len(held)} messages in flight under the frozen consumer "
                                f"exceed twice its prefetch {frozen.prefetch}")
    if outcome.ledger.duplicates > len(held):
        outcome.problems.append(f"{outcome.ledger.duplicates} duplicates exceed the "
                                f"{len(held)} messages the frozen consumer held")
    return outcome


def _holds_nothing_since(client: Client, topic: str, pid: int, since_ms: int) -> bool:
    """Whether the consumer process ``pid`` reported holding nothing after ``since_ms``."""
    return any(c.pid == pid and c.last_seen > since_ms and c.in_flight == 0
               for c in client.consumers(topic))


@stopping_fleets
def poison_messages(stage: Stage, good: int = 100, bad: int = 10,
                    max_retries: int = 3) -> Outcome:
    """Messages whose handler always raises reach the dead-letter queue after exactly
    ``1 + max_retries`` deliveries, with the handler's error; the others are unaffected."""
    started, topic = time.monotonic(), "chaos-poison"
    client = Client(stage.url, registry_ttl=0.5)
    client.create_topic(topic, slots=stage.slots, max_retries=max_retries, retry_backoff=0,
                        visibility_timeout=LEASE)
    fleet = Fleet(stage.workdir / "poison", stage.url, topic, concurrency=4, poison="bad-")
    fleet.spawn()
    sent = _bodies("good", good) + _bodies("bad", bad)
    stage.rng.shuffle(sent)
    _preload(client, topic, sent)
    problems: list[str] = []
    _wait_drained(client, topic, good + bad, problems)
    letters = client.dead_letters(topic)
    figures = {"max_retries": max_retries, "dead_letters": len(letters)}
    outcome = _close_out("poison", started, client, topic, fleet, sent, figures, problems)
    handled = fleet.handled()
    problems = outcome.problems
    if sorted(d.body for d in letters) != sorted(b for b in sent if b.startswith(b"bad-")):
        problems.append("the dead letters are not exactly the poison messages")
    for letter in letters:
        expected_error = f"PoisonError: cannot handle {letter.body!r}"
        if letter.attempts != 1 + max_retries or letter.error != expected_error:
            problems.append(f"dead letter {letter.body!r}: attempts {letter.attempts}, "
                            f"error {letter.error!r}")
        if handled.failed[letter.body] != 1 + max_retries:
            problems.append(f"{letter.body!r} was handled {handled.failed[letter.body]} times")
    if outcome.ledger.dead != bad or outcome.ledger.acknowledged != good:
        problems.append("poison messages leaked into acknowledged, or good ones died")
    return outcome


SKEW_MS = 10 * 60 * 1000
EARLY_TOLERANCE_MS = 5  # two clients' readings of the server's clock may differ this much
LATE_BOUND_MS = 5000  # a due message waits at most this long in these small runs


def _skewed(offset_ms: float) -> ServerClock:
    return ServerClock(local=lambda: time.time() * 1000 + offset_ms)


@stopping_fleets
def clock_skew(stage: Stage, size: int = 1000, skew_ms: float = SKEW_MS,
               lease: float = 1.0, slow: int = 4) -> Outcome:
    """Producers and consumer processes whose host clocks are ``skew_ms`` behind and ahead
    (10 minutes by default) on one Redis: every time is the server's, so nothing changes.
    Ready, delayed (50 ms to 2 s) and slow messages (handlers 2.5 x the lease, kept alive by
    extensions) are all handled exactly once: no live lease recovered early (no duplicate,
    no retry), no delayed message handled before it was due or late by the skew."""
    started, topic = time.monotonic(), "chaos-clock-skew"
    client = Client(stage.url, registry_ttl=0.5)
    client.create_topic(topic, slots=stage.slots, visibility_timeout=lease, retry_backoff=0)
    fleet = Fleet(stage.workdir / "skew", stage.url, topic, concurrency=4, lease=lease,
                  work_ms=1, slow="slow-", slow_ms=2.5 * lease * 1000)
    for offset in (-skew_ms, skew_ms):
        fleet.spawn(clock_skew_ms=offset)
    producers = [Client(stage.url, clock=_skewed(offset)) for offset in (-skew_ms, skew_ms)]
    delayed = _bodies("delay", size // 2)
    sent = _bodies("ready", size - len(delayed) - slow) + delayed + _bodies("slow", slow)
    stage.rng.shuffle(sent)
    for at in range(0, len(sent), 50):
        items = [{"body": b, "delay_ms": stage.rng.randint(50, 2000)} if b.startswith(b"delay")
                 else {"body": b} for b in sent[at : at + 50]]
        producers[(at // 50) % 2].send_many(topic, items)
    for producer in producers:
        producer.close()
    problems: list[str] = []
    _wait_drained(client, topic, size, problems)
    retried = client.stats(topic).groups["default"].counters["retried"]
    handled = fleet.handled()
    late = {body: min(ms) for body, ms in handled.late_ms.items()}
    early = sorted(b.decode() for b, ms in late.items() if ms < -EARLY_TOLERANCE_MS)
    latest = max((ms for b, ms in late.items() if b.startswith(b"delay")), default=0)
    figures = {"skew_ms": skew_ms, "lease_s": lease, "delayed": len(delayed),
               "slow": slow, "retried": retried, "early": len(early),
               "earliest_ms": min(late.values(), default=0), "latest_delayed_ms": latest}
    outcome = _close_out("clock-skew", started, client, topic, fleet, sent, figures, problems)
    if outcome.ledger.acknowledged != size or outcome.ledger.duplicates or retried:
        outcome.problems.append(f"not every message handled exactly once: "
                                f"{outcome.ledger.duplicates} duplicates, {retried} retried "
                                "(a live lease recovered early)")
    if early:
        outcome.problems.append(f"{len(early)} messages handled before they were due: "
                                f"{early[:5]}")
    if latest > LATE_BOUND_MS:
        outcome.problems.append(f"a delayed message was handled {latest} ms after its due "
                                "time")
    return outcome
