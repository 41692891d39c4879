"""The queue's operations on stored messages, as sans-IO generators (see ``calls.py``): the
one place the client takes them from.

Each operation knows the topic's settings and groups already (the client's registry cache
supplies them) and touches only the keys ``keys.py`` builds. Batches travel as one script
call per slot, which on a single node are pipelined into one round trip. Each concept has
its module: ``send.py``, ``claim.py`` (with ``claim_heads.py`` and ``cluster_claim.py``),
``settle.py``, ``dead.py``; ``heads.py`` says which topics keep a heads index and
``generation.py`` what a script answers when the topic changed under the client.
"""

from __future__ import annotations

from .claim import Claimer
from .dead import dead_letters, purge_dead, requeue_dead
from .generation import TopicGone
from .heads import HEADS_MIN_SLOTS, keeps_heads
from .send import (
    MAX_SCRIPT_BATCH,
    MERGED,
    OUTDATED,
    Outgoing,
    enqueue_one,
    join,
    outcome_one,
    send,
    wake,
)
from .settle import RECOVER_LIMIT, ack, extend, fail, recover, release, with_acks

__all__ = [
    "Outgoing",
    "TopicGone",
    "MAX_SCRIPT_BATCH",
    "RECOVER_LIMIT",
    "send",
    "enqueue_one",
    "outcome_one",
    "MERGED",
    "OUTDATED",
    "join",
    "Claimer",
    "ack",
    "with_acks",
    "fail",
    "release",
    "extend",
    "recover",
    "dead_letters",
    "requeue_dead",
    "purge_dead",
    "wake",
    "HEADS_MIN_SLOTS",
    "keeps_heads",
]
