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
from .options import SourceOptions

__all__ = ["resolve", "client_for"]

_clients: dict[tuple[str, int, float, bool], Client] = {}
_lock = threading.Lock()


def resolve(url: str | None) -> str:
    """The URL the job will use: ``url``, else ``RMQ_REDIS_URL``, else the embedded server's
    (started now if it is not running)."""
    return resolve_url(url)


def client_for(url: str, options: SourceOptions | None = None) -> Client:
    """The process's client for ``url`` and the replication ``options`` ask for, connected
    on first use (Spark reuses its Python workers, so later tasks skip the connection
    set-up)."""
    replication = (0, 1.0, False) if options is None else (
        options.replicas, options.replica_timeout, options.replica_fsync)
    with _lock:
        client = _clients.get((url, *replication))
        if client is None:
            client = _clients[(url, *replication)] = Client(
                url, replicas=replication[0], replica_timeout=replication[1],
                replica_fsync=replication[2])
        return client
