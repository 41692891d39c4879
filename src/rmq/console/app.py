"""The console's ASGI application: the JSON API, the pages, the static assets shipped in the
package, ``/metrics``, the security checks and the history sampler (docs/console.md)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException

import rmq
from rmq.errors import (
    AccessDenied,
    CorruptRegistry,
    InputError,
    RedisOutOfMemory,
    RedisUnavailable,
    RMQError,
    TopicConflict,
    UnboundGroup,
    UnknownMessage,
    UnknownTopic,
    WrongKeyType,
)

from . import api, pages
from .metrics import registry_for
from .sampler import Sampler
from .security import LOOPBACK_HOSTS, Guard
from .views import ConsumerRates

__all__ = ["create_app"]

log = logging.getLogger("rmq.console")


def _status(exc: RMQError) -> int:
    if isinstance(exc, UnknownTopic | UnknownMessage):
        return 404
    if isinstance(exc, TopicConflict | CorruptRegistry | WrongKeyType):
        return 409  # a broken topic's own requests: its stored state is not RMQ's
    if isinstance(exc, InputError):
        return 400
    if isinstance(exc, RedisUnavailable | RedisOutOfMemory | AccessDenied):
        return 503
    return 500


def _in_console_words(exc: RMQError, topic: str | None) -> str:
    """``exc``'s message for a user of the console or its API: the library's names a call
    (``create_topic()``) where this user needs a page or a request, and a conflict with a
    topic's stored state names the topic of the request (``topic``), which a key of the
    wrong type (WrongKeyType) does not."""
    if isinstance(exc, UnknownTopic):
        return (f"unknown topic {exc.topic!r}: create it on the Topics page or with "
                "POST /api/topics")
    if isinstance(exc, UnboundGroup):
        return str(UnboundGroup(exc.topic, exc.group, exc.bound, fix=(
            f"bind it first under Groups on its page, or with POST /api/topics/{exc.topic}/"
            "bindings")))
    text = str(exc)
    if topic is not None and _status(exc) == 409 and f"topic {topic!r}" not in text:
        return f"topic {topic!r}: {text}"
    return text


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for error in exc.errors()[:5]:
        if error.get("type") == "json_invalid":
            reason = (error.get("ctx") or {}).get("error", "")
            return f"the request body is not valid JSON{f' ({reason})' if reason else ''}"
        where = ".".join(str(p) for p in error.get("loc", ()) if p not in ("body", "query"))
        parts.append(f"{where or 'request'}: {error.get('msg', 'invalid')}"
                     f"{_given(error.get('input'))}")
    return "; ".join(parts)


def _given(value: object) -> str:
    """``, got <value>`` as JSON for a short scalar a request gave (``got true`` for a JSON
    boolean where a number belongs); nothing for a missing field or a whole object."""
    if isinstance(value, bool | int | float) or (isinstance(value, str) and len(value) <= 40):
        return f", got {json.dumps(value)}"
    return ""


def create_app(client: rmq.Client, *, token: str | None = None,
               allowed_hosts: Iterable[str] | None = LOOPBACK_HOSTS,
               sample_interval: float | None = 2.0, refresh_ms: int = 2000) -> FastAPI:
    """The console over ``client``. ``token``: asked of every request when set;
    ``allowed_hosts``: the Host names answered (None: any; the loopback names by default);
    ``sample_interval``: seconds between history samples of every topic (None: no
    sampling); ``refresh_ms``: how often the pages update themselves."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        sampler = Sampler(client, sample_interval).start() if sample_interval else None
        yield
        if sampler is not None:
            sampler.stop()

    app = FastAPI(title="RMQ console", version="1", lifespan=lifespan,
                  description="The JSON API behind the RMQ console's pages (docs/console.md).",
                  openapi_url="/api/openapi.json", docs_url=None, redoc_url=None)
    app.state.client = client
    app.state.consumer_rates = ConsumerRates()
    app.state.token_required = token is not None
    app.state.refresh_ms = refresh_ms
    hosts = None if allowed_hosts is None else frozenset(h.lower() for h in allowed_hosts)
    app.middleware("http")(Guard(token, hosts))

    @app.exception_handler(RMQError)
    async def queue_error(request: Request, exc: RMQError) -> Response:
        status = _status(exc)
        if status == 500:
            log.error("unexpected queue error on %s: %s", request.url.path, exc)
        topic = request.path_params.get("topic")
        return JSONResponse({"error": _in_console_words(exc, topic)}, status_code=status)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        # unparsable bodies, unknown paths, wrong methods: the same {"error"} shape
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code,
                            headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> Response:
        return JSONResponse({"error": _validation_message(exc)}, status_code=422)

    metrics = registry_for(client)

    @app.get("/metrics", include_in_schema=False)
    def scrape() -> Response:
        return Response(generate_latest(metrics), media_type=CONTENT_TYPE_LATEST)

    app.include_router(api.router)
    app.include_router(pages.router)
    app.mount("/static", StaticFiles(packages=[("rmq.console", "static")]), name="static")
    return app

