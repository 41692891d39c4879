"""One ``rmq.Client`` per Redis URL and Python process, shared by the tasks Spark runs there.

The URL is resolved once, on the driver, and travels inside the reader or writer to the
executors: every task then talks to the Redis the driver chose, whatever the executor's own
environment says. With no ``url`` option and no ``RMQ_REDIS_URL``, that is the embedded
server the driver started, which executors reach only on the driver's machine (``local``
mode); on a cluster, give ``url``.
"""

from __future__ import annotations

import threading

from ..client import Client
from ..client.urls import resolve_url

__all__ = ["resolve", "client_for"]

_clients: dict[str, Client] = {}
_lock = threading.Lock()


def resolve(url: str | None) -> str:
    """The URL the job will use: ``url``, else ``RMQ_REDIS_URL``, else the embedded server's
    (started now if it is not running)."""
    return resolve_url(url)


def client_for(url: str) -> Client:
    """The process's client for ``url``, connected on first use (Spark reuses its Python
    workers, so later tasks skip the connection set-up)."""
    with _lock:
        client = _clients.get(url)
        if client is None:
            client = _clients[url] = Client(url)
        return client
