"""The registry pushes (issue 10, point 1): a pause, a resume and a new binding reach running
consumer and producer processes within a few seconds, without restarting them. The workers
are real ``rmq worker`` processes; each client caches the registry for ``registry_ttl``
(1 s) and consumers heartbeat every 2 s."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import wait_for

import rmq

pytestmark = pytest.mark.extras

HANDLER = '''
import os
from pathlib import Path

OUT = Path(os.environ["RMQ_TEST_DIR"])


def handle(message):
    with open(OUT / f"handled-{message.group}", "a") as out:
        out.write(message.text + "\\n")
'''

PRODUCER = '''
import itertools, sys, time
import rmq
client = rmq.Client(sys.argv[1])
for n in itertools.count():
    client.send("t", str(n))
    time.sleep(0.02)
'''


class Workers:
    """``rmq worker`` processes of topic ``t`` and what each group handled."""

    def __init__(self, url: str, where: Path):
        self.url, self.where = url, where
        (where / "jobs.py").write_text(textwrap.dedent(HANDLER))
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, group: str) -> None:
        log = open(self.where / f"worker-{group}.log", "ab")  # noqa: SIM115 - owned by it
        self.processes.append(subprocess.Popen(
            [sys.executable, "-m", "rmq", "--url", self.url, "worker", "jobs:handle", "t",
             "--group", group, "--concurrency", "2"], cwd=self.where, stdout=log,
            stderr=subprocess.STDOUT, env={**os.environ, "RMQ_TEST_DIR": str(self.where)}))

    def run(self, *args: str) -> None:
        log = open(self.where / "producer.log", "ab")  # noqa: SIM115 - owned by it
        self.processes.append(subprocess.Popen([sys.executable, "-c", *args], stdout=log,
                                               stderr=subprocess.STDOUT))

    def handled(self, group: str) -> list[str]:
        path = self.where / f"handled-{group}"
        return path.read_text().split() if path.exists() else []

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.fixture
def workers(console_url: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers(console_url, tmp_path)
    yield started
    started.stop()


def heartbeat_after(admin: rmq.Client, moment: float) -> Callable[[], bool]:
    """Whether every live consumer of ``t`` has heartbeated since ``moment`` (epoch s)."""
    def beaten() -> bool:
        alive = [c for c in admin.consumers("t") if c.alive]
        return bool(alive) and all(c.last_seen / 1000 > moment for c in alive)
    return beaten


def test_pause_stops_deliveries_to_running_workers_and_resume_restarts_them(
        workers: Workers, client: rmq.Client, console_url: str) -> None:
    admin, producer = client, rmq.Client(console_url)
    admin.create_topic("t", slots=4)
    workers.start("default")
    producer.send_many("t", ["warm-1", "warm-2", "warm-3"])
    wait_for(lambda: len(workers.handled("default")) == 3, 30, "the worker to start handling")

    admin.pause("t")
    paused_at = time.time()
    probes: dict[str, float] = {}

    def stopped() -> bool:
        """A probe sent a while ago is still ready although the worker has heartbeated
        since: it was alive and awake (each send wakes it) and did not claim it."""
        if not probes or time.time() - max(probes.values()) >= 0.1:  # ten probes a second
            body = f"probe-{len(probes)}"
            producer.send("t", body)
            probes[body] = time.time()
        handled = set(workers.handled("default"))
        last_seen = min(c.last_seen for c in admin.consumers("t") if c.alive) / 1000
        return any(at + 2.5 < last_seen and b not in handled for b, at in probes.items())

    wait_for(stopped, 15, "deliveries to stop after the pause")
    handled_while_paused = [b for b in workers.handled("default") if b.startswith("probe-")]
    stop_delay = max((probes[b] for b in handled_while_paused), default=paused_at) - paused_at
    assert all(probes[b] < paused_at + 3 for b in handled_while_paused), (
        "a probe sent well after the pause was delivered")
    assert admin.stats("t").groups["default"].ready == len(probes) - len(handled_while_paused)

    admin.resume("t")
    resumed_at = time.time()
    wait_for(lambda: set(probes) <= set(workers.handled("default")), 15,
             "the paused probes to be handled after the resume")
    print(f"\nthe last probe delivered after the pause was sent {stop_delay:.2f}s after it "
          f"({len(handled_while_paused)} of {len(probes)} probes); after the resume every "
          f"probe was handled within {time.time() - resumed_at:.2f}s")
    producer.close()


def test_a_new_binding_reaches_a_running_producer_and_a_running_worker(
        workers: Workers, client: rmq.Client, console_url: str) -> None:
    admin = client
    admin.create_topic("t", slots=4)
    workers.start("default")
    workers.start("audit")
    wait_for(lambda: len([c for c in admin.consumers("t") if c.alive]) == 2, 30,
             "both workers to register")
    workers.run(textwrap.dedent(PRODUCER), console_url)
    wait_for(lambda: workers.handled("default") and workers.handled("audit"), 30,
             "both groups to receive the producer's messages")

    def latest(group: str) -> int:
        return max((int(n) for n in workers.handled(group)), default=-1)

    admin.unbind("t", "audit")

    def audit_stopped() -> bool:
        pending = admin.stats("t").groups["audit"]
        return pending.ready + pending.in_flight == 0 and latest("default") - latest("audit") > 100

    wait_for(audit_stopped, 20, "the unbound group to stop receiving")
    admin.bind("t", "audit")
    bound_at, first_after = time.time(), latest("default")
    wait_for(lambda: latest("audit") > first_after, 15,
             "the group bound again to receive new messages")
    print(f"\na new binding reached the running producer and worker within "
          f"{time.time() - bound_at:.1f}s")
    assert set(workers.handled("audit")) <= set(workers.handled("default")) | {
        str(n) for n in range(latest("audit") + 1)}
