"""Isolation (SPEC §7): operations over many topics read each topic apart from the others,
so that one topic whose registry entry is broken is reported, with what is wrong, and
skipped, and never stops another topic's service. What counts as broken is decided here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from ..errors import AccessDenied, CorruptRegistry, UnknownTopic, WrongKeyType
from .calls import Op, command
from .keys import TOPICS
from .registry import TopicInfo, list_topics, load_info

__all__ = ["PerTopic", "TOPIC_PROBLEMS", "problem_of", "load_all"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PerTopic(Generic[T]):
    """What an operation over every topic got from each: ``results`` by topic name, for the
    topics it could read, and ``broken``: each topic whose registry entry is broken (or whose
    keys hold what RMQ did not write) with what is wrong, in one line. A topic deleted
    meanwhile is in neither."""

    results: dict[str, T]
    broken: dict[str, str]


# What one topic's own keys can make an operation raise, as opposed to the whole Redis being
# away: a topic that raises one of these is reported and skipped by operations over many.
TOPIC_PROBLEMS = (CorruptRegistry, WrongKeyType, AccessDenied)


def problem_of(error: Exception) -> str:
    """One line saying what is wrong with a topic, from what an operation on it raised."""
    return error.problem if isinstance(error, CorruptRegistry) else str(error)


def load_all() -> Op[PerTopic[TopicInfo]]:
    """Every registered topic's entry: the readable ones, and the broken ones with what is
    wrong with each (not RMQ's settings, keys of another Redis type, a group that is no
    name, a name in the topic set without settings, keys the ACL refuses). One broken
    entry hides no other."""
    infos: dict[str, TopicInfo] = {}
    broken: dict[str, str] = {}
    for name in (yield from list_topics()):
        try:
            infos[name] = yield from load_info(name)
        except TOPIC_PROBLEMS as exc:
            broken[name] = problem_of(exc)
        except UnknownTopic:
            # No settings: deleted since the list was read, unless it is still listed.
            (listed,) = yield [command("SISMEMBER", TOPICS, name)]
            if listed:
                broken[name] = "it is in the topic set but has no settings"
    return PerTopic(infos, broken)
