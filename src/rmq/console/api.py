"""The console's JSON API under ``/api``: every page is drawn from it, and its OpenAPI schema
(``/api/openapi.json``, browsable at ``/api/docs``) documents it for scripts.

Each write is one call of the public client, which checks everything before it writes, so
a refused request changes nothing. Errors are JSON ``{"error": "..."}`` with the status
``app.py`` maps them to.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from pydantic import Strict as StrictMode

import rmq
from rmq.errors import InvalidQuery, TopicConflict
from rmq.filters import compile_filter

from . import views
from .transactions import transactions_view

__all__ = ["router"]

router = APIRouter(prefix="/api")
State = Literal["ready", "delayed", "in_flight", "dead"]
GroupName = Annotated[str, Query(description="consumer group", max_length=200)]


# Numbers taken strictly: JSON's true is not the number 1 (nor "1" a number), as the
# client's own checks refuse a bool for an int; a Number still takes a JSON integer.
Int = Annotated[int, StrictMode()]
Number = Annotated[float, StrictMode()]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TopicChanges(Strict):
    """Topic settings (SPEC §1); a setting left out keeps its default (or current) value."""

    slots: Int | None = Field(None, description="a power of two, 1-1024; fixed at creation")
    max_retries: Int | None = None
    visibility_timeout: Number | None = Field(None, description="seconds")
    max_message_bytes: Int | None = None
    max_delay: Number | None = Field(None, description="seconds")
    retry_backoff: Number | None = Field(None, description="seconds")
    retry_backoff_max: Number | None = Field(None, description="seconds")
    serial_keys: bool | None = None
    check_after: Number | None = Field(None, description="seconds before a check-back")
    check_interval: Number | None = Field(None, description="seconds between checks")
    max_checks: Int | None = None
    tx_retention: Number | None = Field(None, description="seconds a closed id is kept")
    trace: bool | None = Field(None, description="record every state change of every message")
    trace_retention: Number | None = Field(None, description="seconds a traced event is kept")
    trace_cap: Int | None = Field(None, description="traced events kept per slot at most")
    version_retention: Number | None = Field(
        None, description="seconds a key's highest version is remembered (merging by key)")

    def given(self) -> dict[str, Any]:
        """The settings given (the topic's name is not a setting)."""
        return {k: v for k, v in self.model_dump(exclude={"name"}).items() if v is not None}


class NewTopic(TopicChanges):
    name: str = Field(description="1-128 characters of A-Z a-z 0-9 . _ -")


class Binding(Strict):
    """A group to bind, with its filters (docs/semantics.md); binding again replaces them
    unless ``keep_filters``. ``supersede`` (null: a bound group keeps its setting) and its
    ``supersede_limit`` as ``Client.bind`` takes them."""

    group: str
    tags: str | None = Field(None, description="tag expression: '*' or 'a || b'")
    where: str | None = Field(None, description="SQL condition on properties and TAG")
    keep_filters: bool = Field(False, description="keep a bound group's filters (no tags or "
                                                  "where with it)")
    supersede: bool | None = Field(None, description="a send of a message the group is "
                                                     "running tells that delivery to stop; "
                                                     "null keeps the group's setting")
    supersede_limit: Int | None = Field(None, description="with supersede: after this many "
                                                          "supersedes in a row of one message "
                                                          "its next delivery runs to its end "
                                                          "(default 3)")


class Rate(Strict):
    count: Int = Field(description="messages, 1-1000000")
    seconds: Number = Field(description="the window, 0.001-86400 seconds")


class Limits(Strict):
    """A group's fleet-wide limits (docs/limits.md); a limit left out keeps its value, one
    given as null is removed."""

    group: str = "default"
    max_in_flight: Int | None = Field(None, description="1-1000000 messages in flight at "
                                                        "once; null removes it")
    rate: Rate | None = Field(None, description="at most count claimed in any seconds; null "
                                                "removes it")
    max_batches: Int | None = Field(None, description="1-1000000 claims (a batch consumer's "
                                                      "batches) in flight at once; null "
                                                      "removes it")

    def given(self) -> dict[str, Any]:
        """The limits the request names, as ``set_limits`` takes them."""
        given: dict[str, Any] = {}
        if "max_in_flight" in self.model_fields_set:
            given["max_in_flight"] = self.max_in_flight
        if "rate" in self.model_fields_set:
            given["rate"] = None if self.rate is None else (self.rate.count, self.rate.seconds)
        if "max_batches" in self.model_fields_set:
            given["max_batches"] = self.max_batches
        return given


class Outgoing(Strict):
    """A message to send: UTF-8 text; ``delay_ms`` or ``deliver_at`` (epoch ms) for later."""

    body: str
    priority: Int | None = Field(None, description="0-255, higher first (default 128)")
    delay_ms: Int | None = None
    deliver_at: Int | None = None
    key: str | None = None
    tag: str | None = None
    properties: dict[str, str | bool | int | float] | None = None
    version: Int | None = Field(None, description="merging by key: the value's version; "
                                                   "an older one than its key's is dropped")


class Requeue(Strict):
    """Dead letters to put back to ready: ``ids`` as listed, or ``all``."""

    group: str = "default"
    ids: list[str] | None = None
    all: bool = False


class Cancel(Strict):
    """A message to cancel, by its id; in ``group``, or every group when null."""

    message_id: str = Field(max_length=64, description="16 hex digits, as a send answers it")
    group: str | None = None


class Confirmed(Strict):
    """A destructive request names the topic again in ``confirm``."""

    group: str = "default"
    confirm: str


def _client(request: Request) -> rmq.Client:
    client: rmq.Client = request.app.state.client
    return client


def _confirm(topic: str, confirm: str) -> None:
    if confirm != topic:
        raise InvalidQuery(f"confirm must repeat the topic name {topic!r} to go ahead")


@router.get("/overview", summary="Every topic with its groups' backlog, rates, consumers; "
                               "the broken topics with what is wrong")
def overview(request: Request) -> dict[str, Any]:
    return views.overview(_client(request))


@router.get("/topics", summary="Names of the registered topics")
def topics(request: Request) -> dict[str, Any]:
    return {"topics": _client(request).topics()}


@router.post("/topics", status_code=201, summary="Create a topic")
def create_topic(request: Request, topic: NewTopic) -> dict[str, Any]:
    try:
        settings = _client(request).create_topic(topic.name, **topic.given())
    except TopicConflict as exc:  # told in the console's words
        raise TopicConflict(exc.topic, exc.differences, exc.fixed, alter=(
            f"change them under Settings on its page, or with PATCH /api/topics/{exc.topic}")
        ) from None
    return {"name": topic.name, "settings": settings.to_dict()}


@router.get("/topics/{topic}", summary="A topic: settings, groups, backlog, slot heat")
def topic_detail(request: Request, topic: str) -> dict[str, Any]:
    return views.topic_detail(_client(request), topic)


@router.get("/topics/{topic}/transactions",
            summary="Open transactions: age, half messages, checks; abandoned count")
def transactions(request: Request, topic: str) -> dict[str, Any]:
    return transactions_view(_client(request), topic)


@router.patch("/topics/{topic}", summary="Change settings of a topic (not slots)")
def alter_topic(request: Request, topic: str, changes: TopicChanges) -> dict[str, Any]:
    given = changes.given()
    if not given:
        raise InvalidQuery("nothing to change: give at least one setting")
    return {"name": topic, "settings": _client(request).alter_topic(topic, **given).to_dict()}


@router.delete("/topics/{topic}", summary="Delete a topic and every message it holds")
def delete_topic(request: Request, topic: str,
                 confirm: Annotated[str, Query(description="the topic name again")]
                 ) -> dict[str, Any]:
    _confirm(topic, confirm)
    _client(request).delete_topic(topic)
    return {"deleted": topic}


@router.post("/topics/{topic}/pause", summary="Stop consumers claiming from the topic")
def pause(request: Request, topic: str) -> dict[str, Any]:
    _client(request).pause(topic)
    return {"name": topic, "paused": True}


@router.post("/topics/{topic}/resume", summary="Let consumers claim from the topic again")
def resume(request: Request, topic: str) -> dict[str, Any]:
    _client(request).resume(topic)
    return {"name": topic, "paused": False}


@router.post("/topics/{topic}/bindings",
             summary="Bind a group: it gets every later message its filters accept")
def bind(request: Request, topic: str, binding: Binding) -> dict[str, Any]:
    tags, where = binding.tags or None, binding.where or None
    client = _client(request)
    added = client.bind(topic, binding.group, tags=tags, where=where,
                        keep_filters=binding.keep_filters, supersede=binding.supersede,
                        supersede_limit=binding.supersede_limit)
    info = client.topic(topic, fresh=True)  # the binding as stored now
    stored = info.filter_of(binding.group)
    return {"name": topic, "group": binding.group, "added": added, "tags": stored.tags,
            "where": stored.where, "supersede_limit": info.supersede_limit(binding.group),
            "notes": compile_filter(tags, where).notes()}


@router.post("/topics/{topic}/limits", summary="Set a group's fleet-wide limits "
             "(max in flight, rate)")
def set_limits(request: Request, topic: str, limits: Limits) -> dict[str, Any]:
    stored = _client(request).set_limits(topic, limits.group, **limits.given())
    return {"name": topic, "group": limits.group, "limits": views.limits_view(stored)}


@router.delete("/topics/{topic}/bindings/{group}", summary="Unbind a group")
def unbind(request: Request, topic: str, group: str) -> dict[str, Any]:
    removed = _client(request).unbind(topic, group)
    return {"name": topic, "group": group, "removed": removed}


@router.post("/topics/{topic}/messages", status_code=201, summary="Send one message")
def send(request: Request, topic: str, message: Outgoing) -> dict[str, Any]:
    options = {k: v for k, v in message.model_dump().items() if v is not None}
    client = _client(request)
    result = client.send(topic, **options)
    info = client.topic(topic)
    # the groups whose filters turned it away (the send script runs Filter.matches' twin)
    refused = [group for group in info.groups if not info.filter_of(group).matches(
        message.tag, message.properties or {})]
    return {"slot": result.slot, "merged": result.merged, "message_id": result.message_id,
            "outdated": result.outdated, "filtered_by": refused}


@router.get("/topics/{topic}/history", summary="Rates, merge rate and backlog over time")
def history(request: Request, topic: str,
            minutes: Annotated[float, Query(gt=0, le=60)] = 60.0) -> dict[str, Any]:
    return views.history_series(_client(request).history(topic, minutes))


@router.get("/topics/{topic}/messages", summary="A page of a group's messages in one state")
def peek(request: Request, topic: str, state: State, group: GroupName = "default",
         slot: Annotated[int | None, Query(ge=0)] = None,
         offset: Annotated[int, Query(ge=0)] = 0,
         limit: Annotated[int, Query(ge=1, le=500)] = 50) -> dict[str, Any]:
    page = _client(request).peek(topic, state, group, slot=slot, offset=offset, limit=limit)
    return {"total": page.total, "offset": page.offset,
            "rows": [views.message_row(r) for r in page.rows]}


@router.get("/topics/{topic}/find", summary="Find messages by body or key, in any state")
def find(request: Request, topic: str,
         body: Annotated[str | None, Query(max_length=1 << 20)] = None,
         key: Annotated[str | None, Query(max_length=1 << 16)] = None,
         every_slot: bool = False) -> dict[str, Any]:
    body = body or None
    key = key or None
    client = _client(request)
    rows = client.find_messages(topic, body, key=key, every_slot=every_slot)
    # "key": a key alone names a message, whose trace the finder shows once none is stored
    return {"rows": [views.message_row(r, body_limit=None) for r in rows],
            "merge": client.topic(topic).settings.merge}


@router.get("/topics/{topic}/trace", summary="A message's trace: its state changes, oldest "
                                              "first")
def trace(request: Request, topic: str,
          message_id: Annotated[str | None, Query(max_length=64)] = None,
          body: Annotated[str | None, Query(max_length=1 << 20)] = None,
          key: Annotated[str | None, Query(max_length=1 << 16)] = None) -> dict[str, Any]:
    client = _client(request)
    events = client.trace(topic, message_id or None, body=body or None, key=key or None)
    return {"trace": client.topic(topic).settings.trace,
            "events": [e.to_dict() for e in events]}


@router.post("/topics/{topic}/dead/requeue", summary="Requeue dead letters (some or all)")
def requeue(request: Request, topic: str, what: Requeue) -> dict[str, Any]:
    if what.all == (what.ids is not None):
        raise InvalidQuery("give either ids (a list) or all: true")
    if what.ids is not None and not what.ids:
        raise InvalidQuery("ids is empty: select at least one dead letter")
    count = _client(request).requeue_dead(topic, what.group, None if what.all else what.ids)
    return {"requeued": count}


@router.post("/topics/{topic}/cancel", summary="Cancel a message: remove it where pending, "
             "tell its running deliveries to stop")
def cancel(request: Request, topic: str, what: Cancel) -> dict[str, Any]:
    done = _client(request).cancel(topic, what.message_id, what.group)
    return {"topic": topic, "message_id": what.message_id, "group": what.group,
            "pending": done.pending, "running": done.running}


@router.post("/topics/{topic}/dead/purge", summary="Delete every dead letter of a group")
def purge(request: Request, topic: str, what: Confirmed) -> dict[str, Any]:
    _confirm(topic, what.confirm)
    return {"purged": _client(request).purge_dead(topic, what.group)}


@router.get("/consumers", summary="Consumers of every topic (or one): liveness and counts; "
                                "the broken topics with what is wrong")
def consumers(request: Request,
              topic: Annotated[str | None, Query(max_length=200)] = None) -> dict[str, Any]:
    found = views.consumers_view(_client(request), request.app.state.consumer_rates, topic)
    return {**found, "dead_after": views.DEAD_AFTER,
            "forgotten_after": rmq.ConsumerInfo.FORGOTTEN_AFTER}
