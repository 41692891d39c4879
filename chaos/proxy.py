"""A loopback TCP proxy that can cut the network between clients and Redis, for fault tests.

Clients connect to the proxy's port; each connection is piped to the upstream server by two
threads. :meth:`TcpProxy.cut` simulates a network partition in one of two ways:

- ``"reset"``: every open connection is closed (the peer sees a reset or EOF) and new ones
  are closed as soon as they are accepted, as when a firewall or a dead router drops state;
- ``"stall"``: bytes stop flowing both ways and new connections hang, as when packets are
  silently lost; on :meth:`restore` the held bytes flow again (TCP retransmission).
"""

from __future__ import annotations

import contextlib
import socket
import threading

__all__ = ["TcpProxy"]

_CHUNK = 65536


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` to ``upstream_host:upstream_port``."""

    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1"):
        self.upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._refusing = False
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._closed = False
        self.connections = 0  # accepted since start, for reports
        threading.Thread(target=self._accept_loop, name="proxy-accept", daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def cut(self, mode: str = "reset") -> None:
        """Partition clients from Redis (see the module doc for ``mode``)."""
        if mode not in ("reset", "stall"):
            raise ValueError(f"mode must be 'reset' or 'stall', got {mode!r}")
        if mode == "stall":
            self._flowing.clear()
            return
        with self._lock:
            self._refusing = True
            doomed, self._sockets = self._sockets, set()
        for sock in doomed:
            _close(sock)

    def restore(self) -> None:
        """End the partition: accept and forward again, and release stalled bytes."""
        with self._lock:
            self._refusing = False
        self._flowing.set()

    def close(self) -> None:
        self._closed = True
        self.restore()
        _close(self._listener)
        self.cut("reset")

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._open, args=(client,), daemon=True).start()

    def _open(self, client: socket.socket) -> None:
        self._flowing.wait()  # a stalled network: the connect hangs until restored
        with self._lock:
            refusing = self._refusing
        if refusing:
            _close(client)
            return
        try:
            upstream = socket.create_connection(self.upstream, timeout=5)
            upstream.settimeout(None)
        except OSError:
            _close(client)
            return
        with self._lock:
            if self._refusing:
                _close(client)
                _close(upstream)
                return
            self._sockets |= {client, upstream}
        for source, target in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pipe, args=(source, target), daemon=True).start()

    def _pipe(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while True:
                data = source.recv(_CHUNK)
                if not data:
                    break
                self._flowing.wait()
                target.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._sockets -= {source, target}
            _close(source)
            _close(target)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
