"""OpenTelemetry spans of RMQ (the ``otel`` extra; docs/trace.md, "OpenTelemetry").

When ``opentelemetry-api`` is installed and the application has configured a tracer provider
(``opentelemetry.trace.set_tracer_provider``), ``send`` and ``send_many`` make a producer
span, and the worker runtime a consumer span per handler call that links to the producer
spans of the sends merged into its message (at most :data:`MAX_LINKS`, the latest). The
producer's span context travels through Redis beside the message (``storage/links.py``),
written only then. Without the package, or without a provider, :func:`tracer` answers None
and nothing is stored or made.

Names and attributes follow OpenTelemetry's messaging semantic conventions: spans named
``send <topic>`` (kind PRODUCER) and ``process <topic>`` (kind CONSUMER), with
``messaging.system`` ``rmq``, ``messaging.destination.name``, ``messaging.operation.name``
and ``.type``, ``messaging.message.id`` (the message id), ``messaging.consumer.group.name``
and ``messaging.batch.message_count``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .message import Message, SendCounts, SendResult, links_of

try:
    from opentelemetry import trace as _trace
    from opentelemetry.trace import (
        Link,
        NoOpTracerProvider,
        ProxyTracerProvider,
        SpanContext,
        SpanKind,
        TraceFlags,
    )
except ImportError:  # the otel extra is not installed: no spans, nothing stored
    _trace = None  # type: ignore[assignment]

__all__ = ["MAX_LINKS", "SYSTEM", "tracer", "producer_span", "sent", "sent_many", "traceparent",
           "links", "consumer_span"]

MAX_LINKS = 32  # producer spans a consumer span links to at most (the latest sends)
SYSTEM = "rmq"
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


@contextmanager
def producer_span(active: Any, topic: str) -> Iterator[Any]:
    """The span of a send or of a ``send_many`` batch, current inside; the caller adds what
    the send returned (:func:`sent`, :func:`sent_many`)."""
    attributes = {"messaging.system": SYSTEM, "messaging.destination.name": topic,
                  "messaging.operation.name": "send", "messaging.operation.type": "send"}
    with active.start_as_current_span(f"send {topic}", kind=SpanKind.PRODUCER,
                                      attributes=attributes) as span:
        yield span


def sent(span: Any, result: SendResult) -> SendResult:
    """A send's outcome on its span: the message id, and whether it merged."""
    span.set_attribute("messaging.message.id", result.message_id)
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


@contextmanager
def consumer_span(active: Any, message: Message) -> Iterator[Any]:
    """The span of one handler call on ``message``, linked to the producer spans of the
    sends merged into it; an exception the handler raises is recorded on it."""
    attributes = {
        "messaging.system": SYSTEM, "messaging.destination.name": message.topic,
        "messaging.consumer.group.name": message.group,
        "messaging.operation.name": "process", "messaging.operation.type": "process",
        "messaging.message.id": message.message_id, "rmq.delivery.id": message.id,
        "rmq.delivery.attempt": message.attempts}
    with active.start_as_current_span(f"process {message.topic}", kind=SpanKind.CONSUMER,
                                      attributes=attributes,
                                      links=links(links_of(message))) as span:
        yield span
