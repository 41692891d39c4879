"""Every way a topic's registry entry can be broken (another program wrote its keys, or
damaged them), for the isolation tests (SPEC §7): each surface that works over many topics
is run against each of these."""

from __future__ import annotations

from typing import Any

from rmq.storage.keys import TOPICS, RegistryKeys

__all__ = ["BREAKAGES", "break_topic"]

# kind -> what the problem reported for the topic says
BREAKAGES = {
    "settings not JSON": "settings are not RMQ's",
    "settings with a bad value": "settings are not RMQ's",
    "settings of the wrong Redis type": "is a Redis list, not a string",
    "no settings": "in the topic set but has no settings",
    "a bound group of an invalid name": "a bound group is not a group name",
    "groups of the wrong Redis type": "is a Redis string, not a set",
}


def break_topic(redis: Any, topic: str, kind: str) -> None:
    """Break ``topic``'s registry entry (created before) in the way ``kind`` says."""
    keys = RegistryKeys(topic)
    if kind == "settings not JSON":
        redis.set(keys.settings, b"{not json")
    elif kind == "settings with a bad value":
        redis.set(keys.settings, b'{"slots": 3}')
    elif kind == "settings of the wrong Redis type":
        redis.delete(keys.settings)
        redis.rpush(keys.settings, b"slots", b"8")
    elif kind == "no settings":
        redis.delete(keys.settings)
    elif kind == "a bound group of an invalid name":
        redis.sadd(keys.groups, b"bad:group{")
    elif kind == "groups of the wrong Redis type":
        redis.delete(keys.groups)
        redis.set(keys.groups, b"workers")
    else:
        raise AssertionError(f"no such breakage: {kind}")
    redis.sadd(TOPICS, topic)
