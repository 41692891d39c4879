"""The handler of the README's ``rmq worker examples.render:handle renders`` (run it from the
checkout's root, which is where ``rmq worker`` finds ``examples``).

A real one would draw the product's picture; this one logs what it would render. Returning
acknowledges the message; raising retries it with backoff, and after the topic's
``max_retries`` it becomes a dead letter (``rmq dead list renders``).
"""

from __future__ import annotations

import logging

import rmq

log = logging.getLogger(__name__)


def handle(message: rmq.Message) -> None:
    """Render the product named by the message's body (here: log it)."""
    log.info("rendering %s (delivery %d)", message.body.decode(errors="replace"),
             message.attempts)
