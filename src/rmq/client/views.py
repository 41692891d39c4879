"""The client's reading views of stored messages: dead letters (list, requeue, purge),
statistics, snapshots, the console's history, peeks and the message finder.

``ViewFlows`` is a part of :class:`~rmq.client.base.BaseClient`, kept apart so that the
base holds the queue's hot paths; what it uses of the base is ``host.ClientHost``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import replace

from ..errors import InvalidArgument
from ..message import DeadLetter
from ..settings import check_group_name
from ..storage import cancel as cancel_ops
from ..storage import dead, history, registry
from ..storage import peek as peek_ops
from ..storage import transactions as tx_ops
from ..storage.calls import together
from ..storage.cancel import Cancelled
from ..storage.codec import to_ms
from ..storage.generation import TopicGone
from ..storage.history import TopicHistory
from ..storage.peek import PeekPage
from ..storage.registry import TopicInfo
from ..storage.snapshot import SnapshotRow, snapshot_slot
from ..storage.stats import TopicStats, collect
from ..storage.trace import TraceEvent, read_trace, trace_argument, trace_target
from .arguments import check_ids, check_names, check_slots
from .effects import Flow
from .host import ClientHost
from .outgoing import as_bytes

__all__ = ["ViewFlows"]

_MESSAGE_ID = re.compile(r"[0-9a-f]{16}")


class ViewFlows(ClientHost):
    """Flows that read what is stored (and requeue or purge dead letters)."""

    # -- dead letters, stats, snapshots ---------------------------------------------------

    def _dead_letters(self, topic: str, group: str) -> Flow[list[DeadLetter]]:
        check_group_name(group)
        info = yield from self._topic(topic)
        return (yield from dead.dead_letters(topic, check_group_name(group), info.settings,
                                             info.generation))

    def _requeue_dead(self, topic: str, group: str, ids: Iterable[str] | None) -> Flow[int]:
        check_group_name(group)
        wanted = check_ids(ids)

        def requeue(info: TopicInfo, first: bool) -> Flow[int]:
            if first and wanted and dead.of_other_generation(wanted, info.generation):
                # ids of another creation of the topic are ignored, but this client's entry
                # may be the stale one: read it afresh first (_on_current does on TopicGone)
                raise TopicGone(topic, stale=True)
            now = yield from self._now()
            return (yield from dead.requeue_dead(topic, info.generation, group, info.settings,
                                                 wanted, now, not self.is_cluster))

        return (yield from self._on_current(topic, requeue))

    def _cancel(self, topic: str, message_id: object, group: str | None) -> Flow[Cancelled]:
        if not isinstance(message_id, str) or not _MESSAGE_ID.fullmatch(message_id):
            raise InvalidArgument(f"message_id must be a message id (16 hex digits, as "
                                  f"SendResult.message_id), got {message_id!r}")
        if group is not None:
            check_group_name(group)

        def cancel(info: TopicInfo, first: bool) -> Flow[Cancelled]:
            groups = registry.groups_with_data(info) if group is None else [group]
            now = yield from self._now()
            return (yield from cancel_ops.cancel(topic, info.generation, groups,
                                                 info.settings, message_id, now,
                                                 not self.is_cluster))

        return (yield from self._on_current(topic, cancel))

    def _purge_dead(self, topic: str, group: str) -> Flow[int]:
        check_group_name(group)
        info = yield from self._topic(topic)
        return (yield from dead.purge_dead(topic, check_group_name(group), info.settings))

    def _stats(self, topic: str) -> Flow[TopicStats]:
        info = yield from self._topic(topic, fresh=True)
        now = yield from self._now()
        collected, transactions = yield from together([
            collect(topic, registry.groups_with_data(info), info.settings.slots, info.paused,
                    now, info.limits, trace_argument(topic, info.settings)),
            tx_ops.stats(topic, info.settings.slots)])
        stats: TopicStats = replace(collected, transactions=transactions)
        return stats

    def _snapshot_parts(self, topic: str, groups: Sequence[str] | None,
                        slots: Sequence[int] | None) -> Flow[list[tuple[str, int]]]:
        """The (group, slot) parts a snapshot reads, one round trip each."""
        names = check_names(groups)
        info = yield from self._topic(topic, fresh=True)
        wanted = check_slots(slots, info.settings.slots)
        slot_numbers = wanted if wanted is not None else range(info.settings.slots)
        # half messages belong to no group: their part of a slot has the group ""
        return [(group, slot) for group in [*(names or registry.groups_with_data(info)),
                                            *([] if names else [tx_ops.HALVES])]
                for slot in slot_numbers]

    def _snapshot_part(self, topic: str, group: str, slot: int) -> Flow[list[SnapshotRow]]:
        now = yield from self._now()
        if group == tx_ops.HALVES:
            return (yield from tx_ops.snapshot_halves(topic, slot, now))
        info = yield from self._topic(topic)  # its generation names its dead letters
        rows = yield from snapshot_slot(topic, group, slot, now, info.settings.merge == "key")
        return dead.with_dead_letter_ids(rows, info.generation)

    # -- history, peeks and finding messages (the console) --------------------------------

    def _record_history(self, topic: str) -> Flow[bool]:
        info = yield from self._topic(topic)
        now = yield from self._now()
        return (yield from history.record(topic, registry.groups_with_data(info),
                                          info.settings.slots, info.paused, now))

    def _history(self, topic: str, minutes: float) -> Flow[TopicHistory]:
        info = yield from self._topic(topic)
        return (yield from history.read(topic, registry.groups_with_data(info), minutes))

    def _peek(self, topic: str, state: str, group: str, slot: int | None, offset: int,
              limit: int) -> Flow[PeekPage]:
        info = yield from self._topic(topic)
        now = yield from self._now()
        page = yield from peek_ops.peek(topic, check_group_name(group), state,
                                        info.settings.slots, slot, offset, limit, now,
                                        info.settings.merge == "key")
        return replace(page, rows=dead.with_dead_letter_ids(page.rows, info.generation))

    def _find_messages(self, topic: str, body: bytes | str | None, key: bytes | str | None,
                       every_slot: bool) -> Flow[list[SnapshotRow]]:
        info = yield from self._topic(topic)
        now = yield from self._now()
        rows = yield from peek_ops.find(
            topic, registry.groups_with_data(info), info.settings.slots,
            None if body is None else as_bytes("body", body),
            None if key is None else as_bytes("key", key), every_slot, now,
            info.settings.merge == "key")
        return dead.with_dead_letter_ids(rows, info.generation)

    def _trace(self, topic: str, message_id: str | None, body: bytes | str | None,
               key: bytes | str | None) -> Flow[list[TraceEvent]]:
        info = yield from self._topic(topic)
        wanted, member, slots = trace_target(
            topic, info.settings.slots, message_id,
            None if body is None else as_bytes("body", body),
            None if key is None else as_bytes("key", key), info.settings.merge == "key")
        return (yield from read_trace(topic, wanted, member, slots,
                                      registry.groups_with_data(info),
                                      to_ms(info.settings.trace_retention),
                                      info.settings.trace_cap))
