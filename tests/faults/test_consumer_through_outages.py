"""A consumer keeps its promises across a Redis outage longer than its reconnect budget:
after Redis returns, it still extends the lease of the message it is handling, heartbeats
and recovers others' expired leases. (Its client here gives up at once, so the outage that
exceeds the budget lasts one second instead of ten.)"""

from __future__ import annotations

import threading
import time

import pytest
from redis.backoff import NoBackoff
from redis.retry import Retry

import rmq
from rmq.server import wait_until

pytestmark = pytest.mark.faults


def test_consumer_still_extends_heartbeats_and_recovers_after_an_outage_beyond_its_retries(
        fresh_server):
    server = fresh_server(appendfsync="always")
    observer = rmq.Client(server.url)
    observer.create_topic("t", visibility_timeout=1.0, retry_backoff=0)
    started, finish = threading.Event(), threading.Event()

    def handle(message: rmq.Message) -> None:
        started.set()
        finish.wait(30)

    impatient = rmq.Client(server.url, registry_ttl=0.1, retry=Retry(NoBackoff(), 0))
    consumer = rmq.Consumer(impatient, "t", handle, concurrency=1, heartbeat_interval=0.2,
                            recover_interval=0.3)
    consumer.start()
    try:
        observer.send("t", b"long job")
        assert started.wait(10)
        server.kill()
        time.sleep(1.0)  # the outage: longer than the consumer's (zero) reconnect budget
        server.start()
        back = time.monotonic()
        # Held 3 leases past the outage: only a consumer that kept extending still has it.
        wait_until(lambda: time.monotonic() - back > 3.0, 10, "three leases")
        (row,) = list(observer.snapshot("t"))
        assert (row.state, row.attempts) == ("in_flight", 1)
        assert observer.recover("t") == 0
        assert [c.alive for c in observer.consumers("t", dead_after=1.0)] == [True]
        finish.set()
        wait_until(lambda: observer.stats("t").groups["default"].counters["acked"] == 1, 10,
                   "the acknowledgement")
    finally:
        finish.set()
        consumer.stop(grace=5)
        impatient.close()
        observer.close()
