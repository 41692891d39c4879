"""A handler's failure is visible without any logging set up: the worker runtime logs it once,
with its traceback, the delivery id beside the message id, the attempt and the topic; a
dead-lettering is logged at WARNING. Python's default (``logging.lastResort``) prints WARNING
and above to stderr."""

from __future__ import annotations

import subprocess
import sys

import pytest

import rmq

pytestmark = pytest.mark.single_node

SCRIPT = """
import sys, time
import rmq

client = rmq.Client(sys.argv[1])
client.create_topic("renders", slots=1, max_retries=1, retry_backoff=0)
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


def test_a_failing_handler_is_logged_with_its_traceback_without_logging_configured(redis_url):
    done = subprocess.run([sys.executable, "-c", SCRIPT, redis_url], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "dead letters: 1"
    err = done.stderr
    message_id = rmq.message_id_of("renders", b"product:42")
    assert err.count("handler failed on delivery") == 2  # once per failure, two attempts
    assert (f"handler failed on delivery 0-1 (message {message_id}) of topic 'renders' "
            "(attempt 1)") in err
    # the second delivery's id is 3: a claim leaves one id unused after its share
    assert (f"handler failed on delivery 0-3 (message {message_id}) of topic 'renders' "
            "(attempt 2)") in err
    assert err.count("Traceback (most recent call last)") == 2
    assert err.count("ValueError: no price for product:42") == 3  # two tracebacks, one warning
    assert (f"delivery 0-3 (message {message_id}) of topic 'renders' is dead-lettered after 2 "
            "attempts: ValueError: no price for product:42") in err
