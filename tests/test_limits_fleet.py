"""Fleet-wide limits held by many consumers at once (SPEC §10): across processes, after a
consumer is killed, by Redis's clock for rates, and with waiters woken one per freed unit
without polling. Every test runs on a single node and on a cluster."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

from helpers import wait_for

import rmq

# A worker process: Consumers running a handler that counts itself in Redis while it runs
# (INCR/DECR around its body, the highest count kept by a tiny script), so what the test
# reads cannot lie about how many handlers ran at once.
WORKER = """
import sys, time
import rmq

url, seconds, concurrency = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
client = rmq.Client(url)
HIGHEST = "local n = redis.call('INCR', KEYS[1]) " \\
          "if n > tonumber(redis.call('GET', KEYS[2]) or '0') then " \\
          "redis.call('SET', KEYS[2], n) end return n"


def render(message):
    client.redis.eval(HIGHEST, 2, "{gpu}:running", "{gpu}:highest")
    client.redis.incr("{gpu}:started")
    time.sleep(seconds)  # the render's work
    client.redis.decr("{gpu}:running")
    client.redis.incr("{gpu}:done")


consumer = rmq.Consumer(client, "renders", render, concurrency=concurrency,
                        recover_interval=0.5).start()
print("started", flush=True)
sys.stdin.read()  # until the test closes it
consumer.stop(grace=5)
"""


def _workers(redis_url, count, seconds, concurrency=4):
    processes = [subprocess.Popen([sys.executable, "-c", WORKER, redis_url, str(seconds),
                                   str(concurrency)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True) for _ in range(count)]
    for p in processes:
        assert p.stdout.readline().strip() == "started"
    return processes


def _stop(processes):
    for p in processes:
        if p.poll() is None:
            p.stdin.close()
    for p in processes:
        p.wait(timeout=30)


def _number(client, key):
    return int(client.redis.get(key) or 0)


def test_max_in_flight_holds_across_consumers_in_several_processes(redis_url):
    client = rmq.Client(redis_url)
    client.create_topic("renders", slots=4)
    client.set_limits("renders", max_in_flight=3)
    client.send_many("renders", [f"frame-{i}" for i in range(40)])
    workers = _workers(redis_url, 3, 0.05)  # 12 handler threads in all
    try:
        wait_for(lambda: _number(client, "{gpu}:done") == 40, timeout=60, what="40 renders")
    finally:
        _stop(workers)
    assert 1 <= _number(client, "{gpu}:highest") <= 3
    assert client.stats("renders").groups["default"].counters["acked"] == 40
    client.close()


def test_a_killed_consumers_capacity_returns_when_its_leases_expire(redis_url):
    client = rmq.Client(redis_url)
    client.create_topic("renders", visibility_timeout=1)
    client.set_limits("renders", max_in_flight=2)
    client.send_many("renders", [f"frame-{i}" for i in range(4)])
    (worker,) = _workers(redis_url, 1, 3600)  # its renders never finish
    try:
        wait_for(lambda: _number(client, "{gpu}:started") == 2, timeout=20, what="2 renders")
        assert client.claim("renders", count=4) == []  # the killed one holds all capacity
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
        claimed = wait_for(lambda: client.claim("renders", count=4), timeout=20,
                           what="capacity back after the leases expired")
        assert len(claimed) == 2
    finally:
        worker.kill()
        worker.wait(timeout=10)
    client.close()


def test_a_waiting_consumer_wakes_on_the_ack_that_frees_capacity_and_does_not_poll(
        redis_url):
    holder, waiting = rmq.Client(redis_url), rmq.Client(redis_url)
    holder.create_topic("renders")
    holder.set_limits("renders", max_in_flight=1)
    holder.send_many("renders", ["frame-1", "frame-2"])
    (held,) = holder.claim("renders")
    claims = [0]
    claim_due = waiting.claim_due

    def counting(*args, **kwargs):
        claims[0] += 1
        return claim_due(*args, **kwargs)

    waiting.claim_due = counting  # type: ignore[method-assign]
    handled = []
    consumer = rmq.Consumer(waiting, "renders", lambda m: handled.append(time.monotonic()),
                            recover_interval=5).start()
    try:
        wait_for(lambda: claims[0] >= 1, what="the consumer's first claim")
        time.sleep(1.0)  # a window to count claims in, not a synchronisation
        assert claims[0] <= 2  # held back: it sleeps on the wake list, it does not poll
        assert handled == []
        acked = time.monotonic()
        holder.ack(held)
        wait_for(lambda: handled, timeout=5, what="the waiting consumer handles frame-2")
        assert handled[0] - acked < 0.5
    finally:
        consumer.stop(grace=1)
        holder.close()
        waiting.close()


def test_one_freed_unit_wakes_one_waiter_not_all(redis_url):
    holder = rmq.Client(redis_url)
    holder.create_topic("renders")
    holder.set_limits("renders", max_in_flight=1)
    holder.send_many("renders", [f"frame-{i}" for i in range(5)])
    (held,) = holder.claim("renders")
    waiters = [rmq.Client(redis_url) for _ in range(4)]
    woken: list[int] = []
    for w in waiters:
        assert w.claim_due("renders").messages == []

    def wait(index):
        waiters[index].wait_for_capacity("renders", timeout=5)
        woken.append(index)

    threads = [threading.Thread(target=wait, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    wait_for(lambda: holder.redis.zcard("rmq:{renders}:limit:default:waiters") == 4,
             what="4 registered waiters")
    time.sleep(0.2)  # the waiters are in BLPOP by now; nothing wakes them
    assert woken == []
    holder.ack(held)
    wait_for(lambda: woken, timeout=2, what="one waiter woken")
    time.sleep(0.5)  # a window in which a herd would show
    assert len(woken) == 1
    assert len(waiters[woken[0]].claim_due("renders").messages) == 1
    for t in threads:
        t.join(timeout=10)
    for c in [holder, *waiters]:
        c.close()


def _redis_ms(client):
    seconds, micros = client.redis.time()
    return seconds * 1000 + micros // 1000


def test_a_rate_allows_at_most_count_claims_in_any_window_by_redis_clock(redis_url):
    client = rmq.Client(redis_url)
    client.create_topic("renders", slots=2)
    client.set_limits("renders", rate=(5, 0.5))
    client.send_many("renders", [f"frame-{i}" for i in range(60)])
    claims = []  # (Redis time before, Redis time after, messages claimed)
    ends = time.monotonic() + 2.0
    while time.monotonic() < ends:
        before = _redis_ms(client)
        taken = client.claim_due("renders", count=3).messages
        after = _redis_ms(client)
        if taken:
            claims.append((before, after, len(taken)))
            client.ack(taken)
        else:
            client.wait_for_capacity("renders", timeout=1)
    # Claims certainly inside one window (even counting the round trips) never exceed 5.
    for i, (start, _, _) in enumerate(claims):
        inside = sum(n for _, end, n in claims[i:] if end - start < 500)
        assert inside <= 5
    total = sum(n for _, _, n in claims)
    assert 15 <= total <= 25  # 5 per half second for 2 s: about 20, never many more
    client.close()


def test_a_consumer_of_a_group_with_max_in_flight_holds_only_what_its_slow_workers_run(
        redis_url):
    # A message held waiting for a worker would hold a unit of the group's limit while a
    # worker of another consumer may be idle (docs/limits.md).
    client = rmq.Client(redis_url)
    held = {}
    for topic, limits in (("free", {}), ("renders", {"max_in_flight": 8})):
        client.create_topic(topic)
        client.set_limits(topic, **limits)
        client.send_many(topic, [f"frame-{i}" for i in range(20)])
        consumer = rmq.Consumer(client, topic, lambda m: time.sleep(0.05),  # the work
                                concurrency=2).start()
        try:
            wait_for(lambda c=consumer: c.handled == 20, timeout=20, what="20 handled")
            held[topic] = consumer.prefetch
        finally:
            consumer.stop(grace=5)
    assert held["free"] > 2  # prefetched: one claim waits while the workers run the last
    assert held["renders"] == 2
    client.close()
