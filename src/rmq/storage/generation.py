"""What the scripts answer when a topic changed under a client: the topic was deleted, or
deleted and created again, since the client read its generation from the registry
(``lua/includes/generation.lua``)."""

from __future__ import annotations

from typing import Any

__all__ = ["TopicGone", "check_stored"]


class TopicGone(Exception):
    """A send or claim was refused by the scripts: the topic was deleted (``stale`` False),
    or deleted and created again (``stale`` True), since the client read its generation.
    The client reloads the topic once and either goes on or raises UnknownTopic."""

    def __init__(self, topic: str, stale: bool):
        super().__init__(f"topic {topic!r} was {'re-created' if stale else 'deleted'}")
        self.topic = topic
        self.stale = stale


# What enqueue.lua, the claim scripts and the settling scripts that check the topic's
# generation (recover, requeue_dead) return instead of their reply.
_GONE_UNKNOWN = 0
_GONE_STALE = -1


def check_stored(topic: str, reply: Any) -> None:
    """Raise TopicGone when a script's reply (a send's, a claim's, a recover's...) says the
    topic is gone."""
    if isinstance(reply, int):
        raise TopicGone(topic, stale=reply == _GONE_STALE)
