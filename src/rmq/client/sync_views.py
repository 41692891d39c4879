"""``rmq.Client``'s reading views: stats, the snapshot, the throughput history, peeks,
finding messages and their trace. Each runs a flow of
:class:`~rmq.client.views.ViewFlows` and changes nothing but the history's samples."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ..settings import DEFAULT_GROUP
from ..storage.history import TopicHistory
from ..storage.peek import PeekPage
from ..storage.snapshot import SnapshotRow
from ..storage.stats import TopicStats
from ..storage.trace import TraceEvent
from .host import SyncHost
from .views import ViewFlows

__all__ = ["ViewMethods"]


class ViewMethods(ViewFlows, SyncHost):
    """``rmq.Client``'s reading views."""

    def stats(self, topic: str) -> TopicStats:
        """Per group and slot: delayed, ready by priority, in flight, dead, oldest ready age,
        and the counters sent, merged, acked, retried, dead."""
        return self._run(self._stats(topic))

    def snapshot(self, topic: str, *, groups: Sequence[str] | None = None,
                 slots: Sequence[int] | None = None) -> Iterator[SnapshotRow]:
        """Every message the topic holds, in every state including dead letters, without
        changing anything; read one (group, slot) at a time. A message that changes state
        during the read may show twice or not at all."""
        for group, slot in self._run(self._snapshot_parts(topic, groups, slots)):
            yield from self._run(self._snapshot_part(topic, group, slot))

    # -- history, peeks and finding messages (the console) --------------------------------

    def record_history(self, topic: str) -> bool:
        """Take ``topic``'s throughput sample for the current 5-second bucket of Redis's
        clock, unless another client (a console, a consumer) already took it; returns
        whether this call did. Costs one script call when it did not."""
        return self._run(self._record_history(topic))

    def history(self, topic: str, minutes: float = 60.0) -> TopicHistory:
        """The topic's samples of the last ``minutes`` (at most an hour) per group, with
        rates per second and merge rate between consecutive samples (``TopicHistory``)."""
        return self._run(self._history(topic, minutes))

    def peek(self, topic: str, state: str, group: str = DEFAULT_GROUP, *,
             slot: int | None = None, offset: int = 0, limit: int = 50) -> PeekPage:
        """A page of ``group``'s messages in ``state`` (ready, delayed, in_flight, dead):
        of ``slot``, or of every slot in slot order. Reads only the page (and each slot's
        size); changes nothing."""
        return self._run(self._peek(topic, state, group, slot, offset, limit))

    def find_messages(self, topic: str, body: bytes | str | None = None, *,
                      key: bytes | str | None = None,
                      every_slot: bool = False) -> list[SnapshotRow]:
        """Every stored message, in any state and group, with this ``body`` (and ``key``:
        a keyed message is found with its key) or, with no body, every message of ``key``.
        Looks in the slot a send of them goes to; ``every_slot`` (which reads the whole
        topic) also finds messages sent with another ``slot_basis``."""
        return self._run(self._find_messages(topic, body, key, every_slot))

    def trace(self, topic: str, message_id: str | None = None, *,
              body: bytes | str | None = None,
              key: bytes | str | None = None) -> list[TraceEvent]:
        """The recorded state changes of a message of a topic with ``trace`` on, oldest
        first (docs/trace.md): named by its ``message_id`` (every slot is read), or by the
        ``body`` and ``key`` it was sent with (the slot such a send goes to)."""
        return self._run(self._trace(topic, message_id, body, key))
