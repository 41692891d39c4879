"""The client's registry flows: creating, altering and deleting topics, binding groups
(with their filters), pausing, and the consumers' records.

``RegistryFlows`` is a part of :class:`~rmq.client.base.BaseClient`, kept apart so that the
base holds the queue's hot paths; what it uses of the base is ``host.ClientHost``.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConflictingOptions, InvalidArgument
from ..filters import compile_filter
from ..settings import TopicSettings, check_group_name, check_number, check_topic_name
from ..storage import bindings, registry
from ..storage.registry import ConsumerInfo, ConsumerState
from .arguments import MAX_WAIT, check_consumer_id, check_flag, check_state
from .effects import Flow
from .host import ClientHost

__all__ = ["RegistryFlows"]

DEFAULT_SUPERSEDE_LIMIT = 3  # supersedes in a row of one identity before one runs to its end
MAX_SUPERSEDE_LIMIT = 1_000_000


def supersede_option(supersede: object, supersede_limit: object) -> int | None:
    """bind's ``supersede`` and ``supersede_limit`` as bindings.bind takes them: the limit
    (on), None (off), or KEEP_SUPERSEDE (``supersede=None``: a bound group keeps its own)."""
    if supersede is None:
        if supersede_limit is not None:
            raise ConflictingOptions("supersede_limit= goes with supersede=True")
        return bindings.KEEP_SUPERSEDE
    check_flag(supersede, "supersede")
    if not supersede:
        if supersede_limit is not None:
            raise ConflictingOptions("supersede_limit= goes with supersede=True")
        return None
    if supersede_limit is None:
        return DEFAULT_SUPERSEDE_LIMIT
    if not isinstance(supersede_limit, int):
        raise InvalidArgument(f"supersede_limit must be a whole number, got "
                              f"{supersede_limit!r}")
    return int(check_number("supersede_limit", supersede_limit, 1, MAX_SUPERSEDE_LIMIT,
                            InvalidArgument))


class RegistryFlows(ClientHost):
    """Flows that change or read the registry (SPEC §4)."""

    def _create_topic(self, name: str, settings: dict[str, Any]) -> Flow[TopicSettings]:
        check_topic_name(name)
        return (yield from self._changing(
            name, registry.create_topic(name, TopicSettings.build(**settings), settings)))

    def _alter_topic(self, name: str, changes: dict[str, Any]) -> Flow[TopicSettings]:
        check_topic_name(name)
        TopicSettings().altered(**{k: v for k, v in changes.items() if k != "slots"})
        return (yield from self._changing(name, registry.alter_topic(name, changes)))

    def _delete_topic(self, name: str) -> Flow[None]:
        check_topic_name(name)
        # A corrupt entry is deleted too, as the largest topic it could be.
        info = yield from registry.load_info(name, salvage=True)
        yield from self._changing(name, registry.delete_topic(info))

    def _bind(self, topic: str, group: str, tags: object = None, where: object = None,
              keep_filters: object = False, supersede: object = None,
              supersede_limit: object = None) -> Flow[bool]:
        check_flag(keep_filters, "keep_filters")
        if keep_filters and (tags is not None or where is not None):
            raise ConflictingOptions("keep_filters=True keeps the group's filters: "
                                     "give no tags= or where= with it")
        filters = None if keep_filters else compile_filter(tags, where)
        limit = supersede_option(supersede, supersede_limit)
        group = check_group_name(group)
        yield from self._topic(topic)
        return (yield from self._changing(topic, bindings.bind(topic, group, filters, limit)))

    def _unbind(self, topic: str, group: str) -> Flow[bool]:
        group = check_group_name(group)
        yield from self._topic(topic)
        return (yield from self._changing(topic, bindings.unbind(topic, group)))

    def _set_paused(self, topic: str, paused: bool) -> Flow[None]:
        yield from self._topic(topic)
        yield from self._changing(topic, registry.set_paused(topic, paused))

    def _consumers(self, topic: str, dead_after: float) -> Flow[list[ConsumerInfo]]:
        check_number("dead_after", dead_after, 0.001, MAX_WAIT, InvalidArgument)
        yield from self._topic(topic)
        now = yield from self._now()
        return (yield from registry.list_consumers(topic, now, int(dead_after * 1000)))

    def _heartbeat(self, state: ConsumerState) -> Flow[None]:
        check_state(state)
        now = yield from self._now()
        yield from registry.heartbeat(state, now)

    def _forget_consumer(self, topic: str, consumer_id: str) -> Flow[None]:
        check_topic_name(topic)
        check_consumer_id(consumer_id)
        yield from registry.forget_consumer(topic, consumer_id)
