"""Timing a job in this process or in several processes started together.

A *job* is a module-level function ``job(*args) -> run`` that does its setup (connect, build
bodies) and returns ``run``, a callable doing the measured work and returning a count. Processes
are started by a fork server (no inherited connections or threads); they all finish their setup,
meet at a barrier, and only then start the clock, so setup never counts.
"""

from __future__ import annotations

import multiprocessing
import queue
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Span", "time_inline", "time_processes", "process_context"]

SETUP_TIMEOUT = 120.0


@dataclass(frozen=True)
class Span:
    """What one or more timed runs did: their summed result over the wall-clock time from the
    first start to the last end."""

    count: int
    seconds: float
    results: tuple[Any, ...] = ()

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else float("nan")


def process_context() -> Any:
    """Processes fork from a clean server process that has the benchmark's modules loaded:
    no inherited threads or connections, and no re-import on every start."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["rmq.bench.jobs", "numpy"])
    return ctx


def time_inline(job: Callable[..., Callable[[], Any]], *args: Any) -> Span:
    """Set up and run ``job`` in this process."""
    run = job(*args)
    start = time.perf_counter()
    result = run()
    seconds = time.perf_counter() - start
    return Span(_count(result), seconds, (result,))


def _count(result: Any) -> int:
    return int(result[0] if isinstance(result, tuple) else result)


def _worker(index: int, job: Callable[..., Callable[[], Any]], args: tuple[Any, ...],
            barrier: Any, results: Any) -> None:
    try:
        run = job(*args)
        barrier.wait(SETUP_TIMEOUT)
        start = time.monotonic()
        result = run()
        results.put((index, start, time.monotonic(), result, None))
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises
        barrier.abort()
        results.put((index, 0.0, 0.0, None, traceback.format_exc()))


def time_processes(job: Callable[..., Callable[[], Any]], arg_sets: Sequence[tuple[Any, ...]],
                   timeout: float = 3600.0) -> Span:
    """Run ``job`` once per argument tuple, each in its own process, all starting together."""
    ctx = process_context()
    barrier = ctx.Barrier(len(arg_sets))
    results = ctx.Queue()
    processes = [ctx.Process(target=_worker, args=(i, job, args, barrier, results), daemon=True)
                 for i, args in enumerate(arg_sets)]
    for p in processes:
        p.start()
    collected = []
    try:
        for _ in processes:
            try:
                collected.append(results.get(timeout=timeout))
            except queue.Empty:
                raise RuntimeError(f"{job.__name__}: a process gave no result in "
                                   f"{timeout:.0f} s") from None
    finally:
        for p in processes:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    failures = [error for *_, error in collected if error]
    if failures:
        raise RuntimeError(f"{job.__name__} failed in a worker process:\n{failures[0]}")
    collected.sort()
    start = min(c[1] for c in collected)
    end = max(c[2] for c in collected)
    return Span(sum(_count(c[3]) for c in collected), end - start,
                tuple(c[3] for c in collected))
