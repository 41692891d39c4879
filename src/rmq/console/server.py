"""Running the console (or the metrics alone) with uvicorn, with the binding rules of
``security.py``: loopback by default; anywhere else only with a token."""

from __future__ import annotations

import socket
from collections.abc import Callable

import uvicorn
from fastapi import FastAPI
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

import rmq
from rmq.errors import InvalidSetting, RMQError

from .app import create_app
from .metrics import registry_for
from .security import LOOPBACK_HOSTS, Guard, is_loopback

__all__ = ["serve", "metrics_app", "check_binding", "bind"]


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, or an RMQError saying why not (in one line),
    instead of uvicorn's log and exit."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise RMQError(f"cannot bind {host}: {exc.strerror}") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise RMQError(f"cannot listen on {host}:{port}: {exc.strerror} (choose another "
                       "--port or --host)") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def check_binding(host: str, token: str | None) -> frozenset[str] | None:
    """The Host names to answer when bound to ``host``: the loopback names on loopback;
    any beyond it, where a token is then required (InvalidSetting without one)."""
    if is_loopback(host):
        return LOOPBACK_HOSTS
    if not token:
        raise InvalidSetting(f"binding {host} opens the console beyond this machine: give a "
                             "token (--token or RMQ_CONSOLE_TOKEN)")
    return None


def metrics_app(client: rmq.Client, *, token: str | None = None,
                allowed_hosts: frozenset[str] | None = LOOPBACK_HOSTS) -> FastAPI:
    """Only ``/metrics``, for deployments that scrape and want no UI."""
    app = FastAPI(title="RMQ metrics", openapi_url=None, docs_url=None, redoc_url=None)
    app.middleware("http")(Guard(token, allowed_hosts))
    registry = registry_for(client)

    @app.get("/metrics")
    def scrape() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app


def serve(client: rmq.Client, *, host: str = "127.0.0.1", port: int = 8270,
          token: str | None = None, metrics_only: bool = False, refresh: float = 2.0,
          announce: Callable[[str], None] = print) -> None:
    """Serve until SIGINT/SIGTERM. Raises InvalidSetting for a binding beyond loopback
    without a token (the metrics alone may be served anywhere without one)."""
    if metrics_only:
        hosts = LOOPBACK_HOSTS if is_loopback(host) else None
        app = metrics_app(client, token=token, allowed_hosts=hosts)
        path = "/metrics"
    else:
        hosts = check_binding(host, token)
        app = create_app(client, token=token, allowed_hosts=hosts,
                         refresh_ms=int(refresh * 1000))
        path = "/"
    listening = bind(host, port)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}{path}"
    announce(f"{'RMQ metrics' if metrics_only else 'RMQ console'}: {url}"
             f"{'?token=<token>' if token and not metrics_only else ''} (Ctrl-C stops it)")
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[listening])
