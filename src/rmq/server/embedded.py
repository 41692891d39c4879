"""The embedded server: the Redis server RMQ runs itself when no Redis URL is configured.

``Client()`` with no URL and no ``RMQ_REDIS_URL`` starts it (:func:`ensure_embedded`) as a
daemon listening on ``redis.sock`` in its data directory (``$RMQ_HOME``, else ``~/.rmq``),
with its log and append-only file beside it. The daemon outlives the process that started
it, so the next client reuses it and keeps its messages. :func:`embedded_status` shows it
(``rmq server status``) and :func:`stop_embedded` stops it (``rmq server stop``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import redis

from ..errors import RMQError
from .process import MAX_SOCKET_PATH, RedisServer, check_version, pid_alive, wait_until

__all__ = ["EmbeddedStatus", "embedded_home", "embedded_server", "ensure_embedded",
           "embedded_status", "stop_embedded"]


def embedded_home(data_dir: Path | str | None = None) -> Path:
    """The embedded server's data directory: ``data_dir``, else ``$RMQ_HOME``, else
    ``~/.rmq`` (not created here)."""
    chosen = data_dir or os.environ.get("RMQ_HOME") or Path.home() / ".rmq"
    return Path(chosen).expanduser().absolute()


def embedded_server(data_dir: Path | str | None = None, *, port: int = 0,
                    appendfsync: str = "everysec") -> RedisServer:
    """The embedded server's :class:`RedisServer` (running or not): ``redis.sock`` in the data
    directory (:func:`embedded_home`), no TCP port unless ``port``, so it never collides with
    another server; AOF with ``appendfsync``, ``noeviction``."""
    home = embedded_home(data_dir)
    socket = home / "redis.sock"
    if len(str(socket)) > MAX_SOCKET_PATH:
        raise RMQError(f"the embedded server's socket {socket} would be longer than the OS "
                       f"allows ({MAX_SOCKET_PATH} bytes): set RMQ_HOME to a shorter "
                       "directory, or RMQ_REDIS_URL to a Redis server")
    server = RedisServer(port, unixsocket=socket, data_dir=home, appendfsync=appendfsync)
    # A daemon started by another process is still ours to stop: adopt it by its pidfile.
    with contextlib.suppress(OSError, ValueError):
        server._daemon_pid = int(server.pidfile.read_text())
    return server


def ensure_embedded(data_dir: Path | str | None = None, *, port: int = 0,
                    appendfsync: str = "everysec") -> str:
    """The URL (``unix://<data_dir>/redis.sock``) of the embedded server, starting it in the
    background if it is not running (``port`` and ``appendfsync`` apply to that start only).

    The server is daemonized, so it outlives this process and is reused by the next one; a
    lock file makes processes that race here start only one. Raises :class:`RMQError` for a
    data directory that cannot be created and for a server older than Redis 7,
    :class:`ServerNotFound` when there is no server binary.
    """
    server = embedded_server(data_dir, port=port, appendfsync=appendfsync)
    if not server.answers():
        try:
            server.data_dir.mkdir(parents=True, exist_ok=True)
            lock = open(server.data_dir / "server.lock", "w")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise RMQError(f"cannot use {server.data_dir} for the embedded server: "
                           f"{exc.strerror}; set RMQ_HOME to a writable directory, or "
                           "RMQ_REDIS_URL to a Redis server") from None
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not server.answers():  # another process may have started it while we waited
                server.start(daemonize=True)
    check_version(server.info("server"))
    return server.url


@dataclass(frozen=True)
class EmbeddedStatus:
    """What ``rmq server status`` shows. ``state`` is ``running``, ``not running`` or
    ``not answering`` (its process is alive but does not answer PING: paused or hung).
    The figures after ``daemon`` are known only while it runs."""

    state: str
    data_dir: Path
    url: str
    log_path: Path
    pid: int | None = None
    daemon: bool = False  # started in the background (by a client), not by `rmq server`
    version: str | None = None
    tcp_port: int = 0
    used_memory: int | None = None  # bytes
    keys: int | None = None
    uptime_seconds: int | None = None

    @property
    def running(self) -> bool:
        return self.state == "running"

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "data_dir": str(self.data_dir), "url": self.url,
                "log": str(self.log_path), "pid": self.pid, "daemon": self.daemon,
                "version": self.version, "tcp_port": self.tcp_port,
                "used_memory": self.used_memory, "keys": self.keys,
                "uptime_seconds": self.uptime_seconds}


def embedded_status(data_dir: Path | str | None = None) -> EmbeddedStatus:
    """The embedded server's state, read from the server itself (``INFO``, ``DBSIZE``)."""
    server = embedded_server(data_dir)
    status = partial(EmbeddedStatus, data_dir=server.data_dir, url=server.url,
                     log_path=server.log_path)
    try:
        with server.client(socket_timeout=2, socket_connect_timeout=1) as client:
            info = client.info("server") | client.info("memory")
            keys = int(client.dbsize())
            port = int(client.config_get("port").get(b"port", 0))
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        stalled = _stalled_pid(server)
        if stalled is not None:
            return status("not answering", pid=stalled, daemon=True)
        return status("not running")
    pid = int(info["process_id"])
    version = info.get("valkey_version") or info.get("redis_version")
    name = "valkey" if "valkey_version" in info else "redis"
    return status("running", pid=pid, daemon=server._daemon_pid == pid,
                  version=f"{name} {version}", tcp_port=port,
                  used_memory=int(info["used_memory"]), keys=keys,
                  uptime_seconds=int(info["uptime_in_seconds"]))


def _stalled_pid(server: RedisServer) -> int | None:
    # The pidfile's process, if it is still this server: a pid can be reused after a crash,
    # and another process must never be taken for the server.
    pid = server.pid
    if pid is None:
        return None
    with contextlib.suppress(OSError):
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        return pid if str(server.unixsocket).encode() in cmdline else None
    return None


def stop_embedded(data_dir: Path | str | None = None, timeout: float = 30.0
                  ) -> EmbeddedStatus | None:
    """Stop the embedded server of ``data_dir`` cleanly (SIGTERM: it flushes its append-only
    file) and wait until its process is gone. Returns its status from before the stop, or
    None when none was running. A server started in the foreground by ``rmq server`` is
    stopped too (that command then exits). Raises :class:`RMQError` if it does not exit in
    ``timeout`` seconds."""
    status = embedded_status(data_dir)
    if status.pid is None:
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(status.pid, signal.SIGTERM)
        os.kill(status.pid, signal.SIGCONT)  # a paused server cannot act on SIGTERM
    pid = status.pid
    wait_until(lambda: not pid_alive(pid), timeout,
               f"the embedded server (pid {pid}) to exit; its log: {status.log_path}")
    return status
