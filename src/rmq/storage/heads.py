"""The heads index (docs/storage.md, "The heads index"): which topics keep one, and the
call that builds it from every slot."""

from __future__ import annotations

from functools import lru_cache

from ..settings import TopicSettings
from .calls import Call, script_call
from .keys import HeadsKeys, SlotKeys
from .scripts import script

__all__ = ["HEADS_MIN_SLOTS", "keeps_heads", "sync_heads_call", "heads_keys"]

# On a single node a topic of more than this many slots keeps a heads index per group: a
# claim reads a window of slots instead of all. Smaller topics keep the one call over every
# slot: cheap at that size, and the index's extra writes would cost every send more than
# they save.
HEADS_MIN_SLOTS = 16


def keeps_heads(settings: TopicSettings, one_call: bool) -> bool:
    """Whether the topic's scripts keep a heads index: on a single node (``one_call``),
    for topics of more than HEADS_MIN_SLOTS slots."""
    return one_call and settings.slots > HEADS_MIN_SLOTS


def sync_heads_call(topic: str, generation: str, group: str, slots: int) -> Call:
    """sync_heads.lua: rebuild the group's index from every slot's ready and delayed."""
    keys = [SlotKeys(topic, 0).generation, *HeadsKeys(topic, group).all()]
    for slot in range(slots):
        group_keys = SlotKeys(topic, slot).group(group)
        keys += (group_keys.ready, group_keys.delayed)
    return script_call(script("sync_heads"), keys, [generation])


@lru_cache(maxsize=1024)
def heads_keys(topic: str, group: str) -> tuple[str, ...]:
    """claim_heads.lua's first keys: slot 0's generation, then the group's index."""
    return (SlotKeys(topic, 0).generation, *HeadsKeys(topic, group).all())
