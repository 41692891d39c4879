"""A handler's failure is visible without any logging set up (Python's default,
``logging.lastResort``, prints WARNING and above to stderr): a failure that will be retried
is one WARNING line naming the delivery id beside the message id, the attempt, the topic
and the error; the last attempt's failure, which dead-letters the message, is an ERROR with
the traceback. At DEBUG every failure carries its traceback."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

import rmq

pytestmark = pytest.mark.single_node

SCRIPT = """
import logging, sys, time
import rmq

if sys.argv[2] == "debug":
    logging.basicConfig(level=logging.DEBUG)
client = rmq.Client(sys.argv[1])
client.create_topic("renders", slots=1, max_retries=2, retry_backoff=0)
client.send("renders", b"product:42")

def render(message):
    raise ValueError("no price for " + message.text)

consumer = rmq.Consumer(client, "renders", render, heartbeat_interval=60).start()
deadline = time.monotonic() + 20
while not client.dead_letters("renders") and time.monotonic() < deadline:
    time.sleep(0.01)
consumer.stop(grace=1)
print("dead letters:", len(client.dead_letters("renders")))
"""


def _run(redis_url: str, level: str) -> str:
    done = subprocess.run([sys.executable, "-c", SCRIPT, redis_url, level],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "dead letters: 1"
    return done.stderr


def test_a_retried_failure_is_one_warning_line_and_the_last_one_has_its_traceback(redis_url):
    err = _run(redis_url, "default")
    message_id = rmq.message_id_of("renders", b"product:42")
    assert err.count("handler failed on delivery") == 3  # once per failure, three attempts
    lines = err.splitlines()
    # each attempt is a delivery of its own (ids: docs/storage.md, "Delivery ids")
    deliveries = re.findall(r"handler failed on delivery (0-\d+) ", err)
    assert len(set(deliveries)) == 3
    for delivery, attempt in zip(deliveries[:2], (1, 2), strict=True):
        line = (f"handler failed on delivery {delivery} (message {message_id}) of topic "
                f"'renders' (attempt {attempt}), to be retried: ValueError: no price for "
                "product:42")
        # the whole record is one line: the consumer's id, then this
        assert len([x for x in lines if x.endswith(": " + line)]) == 1
    assert (f"handler failed on delivery {deliveries[2]} (message {message_id}) of topic "
            "'renders' (attempt 3, the last): dead-lettered after 3 attempts: ValueError: "
            "no price for product:42") in err
    assert err.count("Traceback (most recent call last)") == 1  # the last attempt's
    assert err.index("(attempt 3, the last)") < err.index("Traceback")
    assert err.count("ValueError: no price for product:42") == 4  # 3 lines, 1 traceback


def test_at_debug_every_failure_carries_its_traceback(redis_url):
    err = _run(redis_url, "debug")
    assert err.count("handler failed on delivery") == 3
    assert err.count("Traceback (most recent call last)") == 3
