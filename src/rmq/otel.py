"""OpenTelemetry spans of RMQ (the ``otel`` extra; docs/trace.md, "OpenTelemetry").

When ``opentelemetry-api`` is installed and the application has configured a tracer provider
(``opentelemetry.trace.set_tracer_provider``), ``send`` and ``send_many`` make a producer
span, ``claim`` a receive span, and the worker runtime a consumer span per handler call that
links to the producer spans of the sends merged into its message (at most
:data:`MAX_LINKS`, the latest). The producer's span context travels through Redis beside the
message (``storage/links.py``), written only then. Without the package, or without a
provider, :func:`tracer` answers None and nothing is stored or made.

Names and attributes follow OpenTelemetry's messaging semantic conventions: spans named
``send <topic>`` (kind PRODUCER), ``claim <topic>`` (kind CLIENT, operation type
``receive``) and ``process <topic>`` (kind CONSUMER), with ``messaging.system`` ``rmq``,
``messaging.destination.name``, ``messaging.operation.name`` and ``.type``,
``messaging.message.id`` (the message id), ``messaging.consumer.group.name``,
``messaging.batch.message_count``, ``messaging.destination.partition.id`` (the slot),
``server.address`` and ``server.port`` (the client's URL), and on a failure ``error.type``
(:func:`error_type`) with the status ERROR.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from .message import Message, SendCounts, SendResult, links_of

try:
    from opentelemetry import trace as _trace
    from opentelemetry.trace import (
        Link,
        NoOpTracerProvider,
        ProxyTracerProvider,
        SpanContext,
        SpanKind,
        StatusCode,
        TraceFlags,
    )
except ImportError:  # the otel extra is not installed: no spans, nothing stored
    _trace = None  # type: ignore[assignment]

__all__ = ["MAX_LINKS", "SYSTEM", "tracer", "server", "error_type", "producer_span", "sent",
           "sent_many", "traceparent", "links", "receive_span", "received", "consumer_span",
           "batch_span"]

MAX_LINKS = 32  # producer spans a consumer span links to at most (the latest sends)
SYSTEM = "rmq"
REDIS_PORT = 6379  # what redis-py connects to when a URL names no port
RECHECK_S = 1.0  # how often the configured tracer provider is looked up again
_provider: Any | None = None  # the configured tracer provider, when one is
_active: Any | None = None  # its tracer for RMQ
_checked_at = -RECHECK_S


def tracer() -> Any | None:
    """The tracer RMQ's spans go to, or None when OpenTelemetry is not installed or no
    tracer provider is configured (then RMQ makes no span and stores no span context).
    Looked up at most once a second (a lookup costs a send a microsecond): a provider set
    later is used from then on."""
    global _provider, _active, _checked_at
    if _trace is None:
        return None
    now = time.monotonic()
    if now - _checked_at < RECHECK_S:
        return _active
    _checked_at = now
    provider = _trace.get_tracer_provider()
    if isinstance(provider, ProxyTracerProvider | NoOpTracerProvider):
        _provider = _active = None
    elif provider is not _provider:
        _provider, _active = provider, provider.get_tracer("rmq")
    return _active


@lru_cache(maxsize=16)
def server(url: str | None) -> Mapping[str, Any]:
    """``server.address`` and ``server.port`` of the Redis a client's ``url`` names (a unix
    socket: its path, and no port); nothing while the URL is not known yet. On a cluster,
    the node the URL names: the one the client first connected to."""
    if not url:
        return {}
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return {"server.address": parts.path}
    return {"server.address": parts.hostname or "localhost",
            "server.port": parts.port or REDIS_PORT}


def error_type(error: BaseException) -> str:
    """An exception's ``error.type``: its class's fully-qualified name
    (``rmq.errors.UnknownTopic``), a builtin's as Python prints it (``ValueError``)."""
    kind = type(error)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


@contextmanager
def _span(active: Any, name: str, kind: Any, attributes: dict[str, Any],
          links: Sequence[Any] = ()) -> Iterator[Any]:
    """A span current inside; an exception raised in it is recorded, sets the status to
    ERROR and names its ``error.type``."""
    with active.start_as_current_span(name, kind=kind, attributes=attributes,
                                      links=links) as span:
        try:
            yield span
        except Exception as exc:  # as the API records: a GeneratorExit is no failure
            span.set_attribute("error.type", error_type(exc))
            span.set_status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}")
            raise


def producer_span(active: Any, topic: str, url: str | None
                  ) -> AbstractContextManager[Any]:
    """The span of a send or of a ``send_many`` batch, current inside; the caller adds what
    the send returned (:func:`sent`, :func:`sent_many`)."""
    attributes = {"messaging.system": SYSTEM, "messaging.destination.name": topic,
                  "messaging.operation.name": "send", "messaging.operation.type": "send",
                  **server(url)}
    return _span(active, f"send {topic}", SpanKind.PRODUCER, attributes)


def sent(span: Any, result: SendResult) -> SendResult:
    """A send's outcome on its span: the message id, and whether it merged."""
    span.set_attribute("messaging.message.id", result.message_id)
    span.set_attribute("messaging.destination.partition.id", str(result.slot))
    span.set_attribute("rmq.merged", result.merged)
    return result


def sent_many(span: Any, counts: SendCounts) -> SendCounts:
    """A batch's outcome on its span: how many it sent, and how many merged."""
    span.set_attribute("messaging.batch.message_count", counts.sent)
    span.set_attribute("rmq.merged_count", counts.merged)
    return counts


def traceparent(span: Any) -> str:
    """The span's context as a W3C ``traceparent``: what is stored beside the message."""
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def _link(text: str) -> Any | None:
    parts = text.split("-")
    if len(parts) != 4:
        return None
    try:
        context = SpanContext(int(parts[1], 16), int(parts[2], 16), is_remote=True,
                              trace_flags=TraceFlags(int(parts[3], 16)))
    except ValueError:
        return None
    return Link(context) if context.is_valid else None


def links(texts: Sequence[str]) -> list[Any]:
    """Links to the producer spans named by ``texts`` (traceparents), the latest
    :data:`MAX_LINKS`; one that cannot be read is left out."""
    found = [_link(text) for text in texts[-MAX_LINKS:]]
    return [link for link in found if link is not None]


def receive_span(active: Any, topic: str, group: str, url: str | None
                 ) -> AbstractContextManager[Any]:
    """The span of a ``claim`` (the application asks for messages: a receive), current
    inside; :func:`received` adds what it claimed."""
    attributes = {"messaging.system": SYSTEM, "messaging.destination.name": topic,
                  "messaging.consumer.group.name": group,
                  "messaging.operation.name": "claim", "messaging.operation.type": "receive",
                  **server(url)}
    return _span(active, f"claim {topic}", SpanKind.CLIENT, attributes)


def received(span: Any, messages: list[Message]) -> list[Message]:
    """A claim's outcome on its span: how many it claimed, and a link carrying the message
    id to each message's latest send (one link a message keeps a claim of up to 128 within
    the SDK's default limit; all of its sends are in ``links_of(message)``)."""
    span.set_attribute("messaging.batch.message_count", len(messages))
    for message in messages:
        latest = links(links_of(message)[-1:])
        if latest:
            span.add_link(latest[0].context, {"messaging.message.id": message.message_id})
    return messages


def consumer_span(active: Any, message: Message, url: str | None
                  ) -> AbstractContextManager[Any]:
    """The span of one handler call on ``message``, linked to the producer spans of the
    sends merged into it; an exception the handler raises is recorded on it."""
    attributes = {
        "messaging.system": SYSTEM, "messaging.destination.name": message.topic,
        "messaging.consumer.group.name": message.group,
        "messaging.operation.name": "process", "messaging.operation.type": "process",
        "messaging.destination.partition.id": str(message.slot),
        "messaging.message.id": message.message_id, "rmq.delivery.id": message.id,
        "rmq.delivery.attempt": message.attempts, **server(url)}
    return _span(active, f"process {message.topic}", SpanKind.CONSUMER, attributes,
                 links(links_of(message)))


def batch_span(active: Any, messages: Sequence[Message], url: str | None
               ) -> AbstractContextManager[Any]:
    """The span of one batch handler call on ``messages`` (one group's), with
    ``messaging.batch.message_count``, linked to each message's latest send (carrying its
    message id, as :func:`received` does); an exception the handler raises is recorded on
    it. Which messages a ``BatchFailed`` named is each message's trace (docs/trace.md)."""
    first = messages[0]
    attributes = {
        "messaging.system": SYSTEM, "messaging.destination.name": first.topic,
        "messaging.consumer.group.name": first.group,
        "messaging.operation.name": "process", "messaging.operation.type": "process",
        "messaging.batch.message_count": len(messages), **server(url)}
    found = []
    for message in messages:
        latest = links(links_of(message)[-1:])
        if latest:
            found.append(Link(latest[0].context, {"messaging.message.id": message.message_id}))
    return _span(active, f"process {first.topic}", SpanKind.CONSUMER, attributes, found)
