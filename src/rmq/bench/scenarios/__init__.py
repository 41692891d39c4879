"""The benchmark's scenarios, in the order they run: each is ``run(bench) -> Report``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from . import (
    batch,
    consume,
    delay,
    filters,
    headline,
    limits,
    memory,
    merge,
    newest,
    priority,
    replicas,
    scale_out,
    scaling,
    send,
    trace,
    transactions,
)

if TYPE_CHECKING:
    from ..context import Bench
    from ..report import Report

__all__ = ["SCENARIOS"]

SCENARIOS: dict[str, Callable[[Bench], Report]] = {
    "send": send.run,
    "merge": merge.run,
    "filters": filters.run,
    "transactions": transactions.run,
    "consume": consume.run,
    "replicas": replicas.run,
    "limits": limits.run,
    "batch": batch.run,
    "trace": trace.run,
    "newest": newest.run,
    "priority": priority.run,
    "delay": delay.run,
    "memory": memory.run,
    "headline": headline.run,
    "scaling": scaling.run,
    "scale-out": scale_out.run,
}
