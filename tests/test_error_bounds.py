"""A failure's error as Redis keeps it (docs/reliability.md "Dead letters"): at most
ERROR_LIMIT bytes of UTF-8 in the dead letter and in the trace, cut on a character's
boundary with a marker, so a handler whose exception carries megabytes, failing again and
again, stores kilobytes."""

from __future__ import annotations

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import wait_for

import rmq
from rmq.storage.keys import SlotKeys
from rmq.storage.settle import ERROR_LIMIT, bounded_error

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]

HUGE = "é" * 1_000_000  # 2 MB of UTF-8, two bytes a character


def test_a_huge_exception_failing_until_dead_stores_a_bounded_error(client):
    client.create_topic("renders", max_retries=3, retry_backoff=0, trace=True)
    sent = client.send("renders", "p")

    def handler(message: rmq.Message) -> None:
        raise ValueError(HUGE)

    consumer = rmq.Consumer(client, "renders", handler, heartbeat_interval=60).start()
    try:
        (dead,) = wait_for(lambda: client.dead_letters("renders"), what="the dead letter")
    finally:
        consumer.stop(grace=1)
    errors = [dead.error] + [e.error for e in client.trace("renders", sent.message_id)
                             if e.error is not None]
    assert len(errors) == 1 + 4 + 1  # the dead letter; 4 attempts failed, then dead
    for error in errors:
        assert error.startswith("ValueError: éé")
        assert error.endswith(f" [... cut: {len('ValueError: ') + 2 * len(HUGE)} bytes in all]")
        assert len(error.encode()) <= ERROR_LIMIT
    keys = SlotKeys("renders", 0)
    held = sum(client.redis.memory_usage(key) or 0
               for key in (keys.trace_log, keys.group("default").dead))
    assert held < 8 * ERROR_LIMIT  # 6 errors, nothing of the 2 MB each


@pytest.mark.parametrize("text", ["", "boom", "x" * ERROR_LIMIT, "é" * (ERROR_LIMIT // 2)])
def test_an_error_within_the_limit_is_stored_as_it_is(text):
    assert bounded_error(text) == text


def test_a_cut_never_splits_a_character():
    for pad in range(4):
        cut = bounded_error("x" * pad + "€" * ERROR_LIMIT)  # 3 bytes a character
        assert len(cut.encode()) <= ERROR_LIMIT
        assert cut.endswith(f" [... cut: {pad + 3 * ERROR_LIMIT} bytes in all]")
        assert set(cut.split(" [")[0][pad:]) == {"€"}
