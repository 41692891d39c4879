"""The runtime's threads: how they are started, and how they survive errors."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from ..errors import RMQError, UnknownTopic

__all__ = ["log", "spawn", "guarded"]

log = logging.getLogger("rmq.consumer")


def spawn(role: str, topic: str, target: Callable[[], None]) -> threading.Thread:
    """Start a daemon thread named ``rmq-<role>-<topic>`` (what a thread dump shows)."""
    thread = threading.Thread(target=target, name=f"rmq-{role}-{topic}", daemon=True)
    thread.start()
    return thread


def guarded(who: str, action: Callable[[], Any]) -> Any:
    """Run ``action``; an error is logged, not raised, and None returned. The runtime's
    threads must outlive any error: a dead thread would stall the consumer silently with
    messages ready."""
    try:
        return action()
    except UnknownTopic as exc:  # the fetcher says so once, at ERROR: not every second here
        log.debug("%s: %s", who, exc)
    except RMQError as exc:
        log.warning("%s: %s", who, exc)
    except Exception:
        log.exception("%s: unexpected error (carrying on)", who)
    return None
