"""``rmq.Client`` and ``rmq.AsyncClient`` offer the same queue: the same public methods and
properties, each method with the same parameters (names, kinds, defaults), the async ones
awaited. Only opening differs: an ``AsyncClient`` connects when awaited (``open``,
``connect``), a ``Client`` when made."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import rmq

ASYNC_ONLY = {"open", "connect"}


def _public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def _parameters(function: Callable[..., object]) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def test_the_two_clients_offer_the_same_public_names():
    assert _public(rmq.Client) == _public(rmq.AsyncClient) - ASYNC_ONLY
    assert _public(rmq.AsyncClient) >= ASYNC_ONLY


def test_each_method_takes_the_same_parameters_on_both_clients():
    differing = []
    for name in sorted(_public(rmq.Client)):
        sync, asynchronous = getattr(rmq.Client, name), getattr(rmq.AsyncClient, name)
        if not (inspect.isfunction(sync) and inspect.isfunction(asynchronous)):
            assert inspect.isfunction(sync) == inspect.isfunction(asynchronous), name
            continue
        if _parameters(sync) != _parameters(asynchronous):
            differing.append(name)
    assert differing == []


def test_the_async_clients_queue_methods_are_awaited():
    # what the sync client returns at once, the async one returns to await (a decorator
    # such as ``handler`` returns the function it decorates, on both)
    plain = {"handler", "checker", "transaction", "now"}
    assert plain <= _public(rmq.AsyncClient)
    not_awaited = [
        name for name in sorted(_public(rmq.AsyncClient) - ASYNC_ONLY - plain)
        if inspect.isfunction(getattr(rmq.AsyncClient, name))
        and not inspect.iscoroutinefunction(getattr(rmq.AsyncClient, name))
        and not inspect.isasyncgenfunction(getattr(rmq.AsyncClient, name))]
    assert not_awaited == []
