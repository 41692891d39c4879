#!/usr/bin/env python3
"""Redis-side cost of RMQ's hot paths in instructions (valgrind callgrind), which unlike
seconds do not move with the machine's load: the same workload gives the same count.

Runs redis-server under callgrind twice per workload, once with the set-up only and once
with set-up plus the measured work, and reports the difference per message, plus the
functions where the measured run spent its instructions (inclusive, top 40).

    bench/profile_server_callgrind.py [--out bench/profiles/server_callgrind.txt]
                                      [--merge body|key] [--supersede]

``--merge key`` makes the topic merge by key (each body its own key), ``--supersede`` binds
the group that claims with ``supersede=True``: the same messages, claimed and acknowledged
alike, so that the runs tell what each costs.
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import redis

import rmq
from rmq.server import free_port, wait_until

MESSAGES = 6000


def _bodies() -> list[bytes]:
    rnd = random.Random(1)  # the same bodies every run: the counts must repeat
    return [rnd.randbytes(50).hex().encode() for _ in range(MESSAGES)]


def _under_callgrind(work: Callable[[rmq.Client], None], out_dir: str) -> tuple[int, str]:
    """Total instructions of a redis-server that ran ``work``, and its callgrind file."""
    port = free_port()
    out = os.path.join(out_dir, f"callgrind.{port}")
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "redis-server",
         "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    probe = redis.Redis(port=port)
    wait_until(lambda: _pings(probe), 60, "redis-server under callgrind")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no persistence, on purpose
        client = rmq.Client(f"redis://127.0.0.1:{port}")
    work(client)
    client.close()
    probe.shutdown(nosave=True)
    server.wait(60)
    with open(out) as f:
        for line in f:
            if line.startswith(("totals:", "summary:")):
                return int(line.split()[1]), out
    raise RuntimeError(f"no totals in {out}")


def _pings(r: redis.Redis) -> bool:
    try:
        return bool(r.ping())
    except redis.ConnectionError:
        return False


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out",
                   default=str(Path(__file__).parent / "profiles" / "server_callgrind.txt"))
    p.add_argument("--merge", choices=("body", "key"), default="body")
    p.add_argument("--supersede", action="store_true")
    args = p.parse_args(argv)
    group = "gpu"
    if not shutil.which("valgrind"):
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 1
    bodies = _bodies()

    def warm(client: rmq.Client) -> None:
        # loads RMQ's Functions library (once per server, tens of thousands of instructions
        # per message of this run were it counted) in the set-up run and the measured alike
        client.create_topic("warm")
        client.send("warm", b"x")

    def topic(client: rmq.Client) -> None:
        client.create_topic("t", slots=8, merge=args.merge)
        client.bind("t", group, supersede=args.supersede)

    def fill(client: rmq.Client) -> None:
        warm(client)
        topic(client)
        for i in range(0, MESSAGES, 500):
            client.send_many("t", bodies[i:i + 500])

    def claim_ack(client: rmq.Client) -> None:
        fill(client)
        for _ in range(50):
            client.ack(client.claim("t", group, count=100))

    def topic_only(client: rmq.Client) -> None:
        warm(client)
        topic(client)

    workloads = [
        ("send_many, batches of 500, per message", topic_only, fill, MESSAGES),
        ("claim(100) + ack, 8 slots, per message", fill, claim_ack, 5000),
    ]
    lines = [__doc__.split("\n\n")[0], ""]
    with tempfile.TemporaryDirectory(prefix="rmq-callgrind-") as tmp:
        for name, base, measured, n in workloads:
            before, _ = _under_callgrind(base, tmp)
            after, profile = _under_callgrind(measured, tmp)
            lines.append(f"{name}: {(after - before) / n:,.0f} instructions")
            annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", profile],
                                       capture_output=True, text=True, check=True).stdout
            rows = [row for row in annotated.splitlines() if "%)" in row][:40]
            lines += ["  top functions of the measured run (inclusive):"] + [
                "    " + row.strip() for row in rows] + [""]
            for leftover in glob.glob(os.path.join(tmp, "callgrind.*")):
                os.remove(leftover)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
