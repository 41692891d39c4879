"""The trace across a consumer killed while it holds a lease (SPEC §11): its claim names it,
and once the lease has expired and is recovered the trace shows the expiry, naming the
consumer that held it, before the next delivery."""

from __future__ import annotations

import select
import subprocess
import sys

import pytest
from helpers import wait_for

import rmq

pytestmark = pytest.mark.single_node

HOLDER = """
import sys, threading
import rmq

client = rmq.Client(sys.argv[1])


def hold(message):
    print(message.id, message.message_id, flush=True)
    threading.Event().wait()  # holds the lease until the process is killed


rmq.Consumer(client, "renders", hold, name="doomed", concurrency=1).run()
"""


def test_a_consumer_killed_holding_a_lease_shows_its_expired_lease_in_the_trace(redis_url):
    with rmq.Client(redis_url) as client:
        client.create_topic("renders", slots=2, trace=True, visibility_timeout=1,
                            retry_backoff=0)
        sent = client.send("renders", b"product:42")
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, redis_url],
                                  stdout=subprocess.PIPE, text=True)
        try:
            readable, _, _ = select.select([holder.stdout], [], [], 60)
            assert readable, "the consumer never took the message"
            delivery, message_id = holder.stdout.readline().split()
        finally:
            holder.kill()  # SIGKILL: no release, no ack, the lease is left to expire
            holder.wait(timeout=30)
        assert message_id == sent.message_id
        wait_for(lambda: client.recover("renders") == 1, timeout=30,
                 what="the killed consumer's lease recovered")
        (again,) = client.claim("renders", holder="survivor")
        events = client.trace("renders", sent.message_id)

    # the keeper may have extended the lease while the process lived
    story = [e for e in events if e.event != "extended"]
    assert [e.event for e in story] == ["sent", "claimed", "expired", "claimed"]
    claimed, expired, claimed_again = story[1:]
    assert (claimed.delivery_id, claimed.consumer, claimed.attempt) == (delivery, "doomed", 1)
    assert (expired.delivery_id, expired.consumer, expired.attempt, expired.error) == (
        delivery, "doomed", 1, "lease expired")
    assert (claimed_again.delivery_id, claimed_again.consumer, claimed_again.attempt) == (
        again.id, "survivor", 2)
    assert claimed.time <= expired.time <= claimed_again.time
