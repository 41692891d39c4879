"""Consumer processes for fault scenarios: started, killed, frozen, and what they handled.

Each worker (``chaos.worker``) is a real Python process with its own connections; each
appends what it handled to its own log file in the fleet's directory, and those logs outlive
the process, so a SIGKILLed worker's work is still counted.
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from rmq.runtime.batches import BatchRoom
from rmq.runtime.prefetch import Prefetch

__all__ = ["Worker", "Fleet", "Handled", "stopping_fleets"]

READY_TIMEOUT = 30.0
# The checkout that holds this package: first on each worker's PYTHONPATH, so that
# ``python -m chaos.worker`` finds it whatever directory the scenario runs in.
CHECKOUT = str(Path(__file__).resolve().parent.parent)
P = ParamSpec("P")
T = TypeVar("T")


@dataclass
class Worker:
    """One consumer process."""

    process: subprocess.Popen[bytes]
    log: Path
    stderr: Path
    prefetch: int

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def handlings(self) -> int:
        """How many handlings this worker has recorded so far."""
        with contextlib.suppress(FileNotFoundError):
            return self.log.read_bytes().count(b"\n")
        return 0

    def signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL, as a crash or the OOM killer would, and reap the process."""
        self.signal(signal.SIGKILL)
        self.process.wait(10)


@dataclass
class Handled:
    """What the handlers recorded: per body, the successful handlings and the failures."""

    ok: Counter[bytes] = field(default_factory=Counter)
    failed: Counter[bytes] = field(default_factory=Counter)
    attempts: dict[bytes, list[int]] = field(default_factory=dict)
    late_ms: dict[bytes, list[int]] = field(default_factory=dict)  # handler start - due

    @property
    def handlings(self) -> int:
        return sum(self.ok.values())

    @property
    def duplicates(self) -> int:
        """Handlings beyond the first of each body."""
        return self.handlings - len(self.ok)


def _worker_environment() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [CHECKOUT, os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


class Fleet:
    """Worker processes consuming ``topic`` from ``url``; ``options`` are worker flags
    (``concurrency``, ``prefetch``, ``lease``, ``work_ms``, ``poison``, ...).
    ``Fleet.unstopped`` holds every fleet not stopped yet, so a failing scenario can still
    stop its processes (see :func:`stopping_fleets`)."""

    unstopped: set[Fleet] = set()

    def __init__(self, directory: Path, url: str, topic: str, **options: Any):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.url, self.topic, self.options = url, topic, options
        self.workers: list[Worker] = []
        Fleet.unstopped.add(self)

    def spawn(self, **overrides: Any) -> Worker:
        """Start one worker and return once it is consuming."""
        options = {**self.options, **overrides}
        n = len(self.workers)
        log, stderr = self.directory / f"worker-{n}.log", self.directory / f"worker-{n}.err"
        argv = [sys.executable, "-m", "chaos.worker", "--url", self.url,
                "--topic", self.topic, "--log", str(log)]
        for name, value in options.items():
            if value is not None:
                argv += [f"--{name.replace('_', '-')}", str(value)]
        with open(stderr, "ab") as err:
            process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err,
                                       stdin=subprocess.DEVNULL, env=_worker_environment())
        concurrency = int(options.get("concurrency") or 4)
        given, batch = options.get("prefetch"), options.get("batch")
        # the most the worker's Consumer may hold: its prefetch, or the adaptive default's
        # cap; a batch consumer's, a batch per worker and one being claimed, each full
        most = (Prefetch(concurrency, None if given is None else int(given)).most
                if batch is None else BatchRoom(concurrency, int(batch)).limit * int(batch))
        worker = Worker(process, log, stderr, most)
        self.workers.append(worker)
        self._wait_ready(worker)
        return worker

    def _wait_ready(self, worker: Worker) -> None:
        assert worker.process.stdout is not None
        ready, _, _ = select.select([worker.process.stdout], [], [], READY_TIMEOUT)
        line = worker.process.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            worker.kill()
            raise RuntimeError(f"worker {worker.pid} did not start:\n"
                               f"{worker.stderr.read_text(errors='replace')[-2000:]}")

    def alive(self) -> list[Worker]:
        return [w for w in self.workers if w.alive]

    def handled(self) -> Handled:
        """Everything every worker (alive or dead) has recorded so far."""
        result = Handled()
        for worker in self.workers:
            with contextlib.suppress(FileNotFoundError):
                for line in worker.log.read_bytes().splitlines():
                    parts = line.split(b" ")
                    if len(parts) != 4:
                        continue  # a line cut short by a kill mid-write is not a handling
                    outcome, body, attempts, late = parts
                    (result.ok if outcome == b"ok" else result.failed)[body] += 1
                    result.attempts.setdefault(body, []).append(int(attempts))
                    result.late_ms.setdefault(body, []).append(int(late))
        return result

    def handlings(self) -> int:
        """How many handlings (successful or not) were recorded so far: cheap, for progress."""
        total = 0
        for worker in self.workers:
            with contextlib.suppress(FileNotFoundError):
                total += worker.log.read_bytes().count(b"\n")
        return total

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM every live worker (they finish running handlers), SIGKILL stragglers."""
        Fleet.unstopped.discard(self)
        for worker in self.alive():
            worker.signal(signal.SIGCONT)  # a frozen worker cannot act on SIGTERM
            worker.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for worker in self.workers:
            try:
                worker.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.kill()
            if worker.process.stdout is not None:
                worker.process.stdout.close()

    def errors(self) -> str:
        """The workers' stderr, for a failure report."""
        return "\n".join(f"--- worker {w.pid}\n{w.stderr.read_text(errors='replace')[-3000:]}"
                         for w in self.workers if w.stderr.exists())


def stopping_fleets(scenario: Callable[P, T]) -> Callable[P, T]:
    """Decorator: whatever happens in ``scenario``, the fleets it started are stopped."""
    @functools.wraps(scenario)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        before = set(Fleet.unstopped)
        try:
            return scenario(*args, **kwargs)
        finally:
            for fleet in Fleet.unstopped - before:
                fleet.stop()
    return run
