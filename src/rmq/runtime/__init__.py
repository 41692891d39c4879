"""The worker runtime: ``Consumer`` runs a handler over a topic's messages (SPEC §3), and
``run_all`` runs consumers in the foreground until SIGINT or SIGTERM. It drives any client
with the methods of :class:`~rmq.runtime.protocol.QueueClient` (in practice ``rmq.Client``)."""

from .consumer import Consumer
from .protocol import QueueClient
from .signals import run_all, start_each

__all__ = ["Consumer", "QueueClient", "run_all", "start_each"]
