"""The worker runtime: ``Consumer`` runs a handler over a topic's messages (SPEC §3)."""

from .consumer import Consumer, run_all

__all__ = ["Consumer", "run_all"]
