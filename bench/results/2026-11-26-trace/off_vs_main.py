"""The hot paths with the trace off against main's, in the same run: one redis-server, the
same timing script run alternately with main's checkout and this branch's on PYTHONPATH
(each in a fresh process), ROUNDS rounds. Measures send_many (batch 500), single sends and
claim(100) + ack on an 8-slot topic with the trace off, through the public API only; and
for send_many and claim + ack, Redis's own time in the scripts per message (INFO
commandstats), which the machine's load moves less than wall time.

    python off_vs_main.py MAIN_SRC BRANCH_SRC [ROUNDS]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile

from rmq.server import RedisServer

TIMING = r"""
import json, sys, time
import redis
import rmq

url, messages, singles = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
client = rmq.Client(url)
for name in client.topics():
    client.delete_topic(name)
client.create_topic("ab", slots=8)
raw = redis.Redis.from_url(url)


def server_us():
    # Redis's own time in scripts (FCALL, EVALSHA), which the machine's load moves less
    stats = raw.info("commandstats")
    raw.config_resetstat()
    return sum(v["usec"] for k, v in stats.items()
               if k.startswith(("cmdstat_fcall", "cmdstat_evalsha")))


server_us()
bodies = [b"m-%09d-" % n + b"x" * 88 for n in range(messages)]
began = time.perf_counter()
for i in range(0, messages, 500):
    client.send_many("ab", bodies[i:i + 500])
send_many = messages / (time.perf_counter() - began)
send_many_us = server_us() / messages
began = time.perf_counter()
done = 0
while True:
    batch = client.claim("ab", count=100)
    if not batch:
        break
    client.ack(batch)
    done += len(batch)
claim_ack = done / (time.perf_counter() - began)
claim_ack_us = server_us() / messages
assert done == messages, done
began = time.perf_counter()
for n in range(singles):
    client.send("ab", b"s-%d" % n)
single = singles / (time.perf_counter() - began)
client.delete_topic("ab")
print(json.dumps({"send_many": send_many, "claim_ack": claim_ack, "send": single,
                  "send_many_server_us": send_many_us, "claim_ack_server_us": claim_ack_us}))
"""


def main() -> None:
    main_src, branch_src = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    results: dict[str, dict[str, list[float]]] = {"main": {}, "branch": {}}
    with tempfile.TemporaryDirectory() as home, RedisServer(data_dir=home,
                                                            appendonly=False) as server:
        for r in range(rounds):
            for name, src in (("main", main_src), ("branch", branch_src)):
                done = subprocess.run([sys.executable, "-W", "ignore", "-c", TIMING, server.url,
                                       "100000", "10000"],
                                      env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"},
                                      capture_output=True, text=True)
                if done.returncode:
                    raise SystemExit(done.stderr)
                figures = json.loads(done.stdout.strip().splitlines()[-1])
                print(f"round {r + 1} {name}: " + ", ".join(
                    f"{k} {v:.2f}" if k.endswith("_us") else f"{k} {v / 1000:.1f} k/s"
                    for k, v in figures.items()), flush=True)
                for k, v in figures.items():
                    results[name].setdefault(k, []).append(v)
    for k in results["main"]:
        m, b = statistics.median(results["main"][k]), statistics.median(results["branch"][k])
        if k.endswith("_us"):
            print(f"{k}: main {m:.2f} µs/msg, branch (trace off) {b:.2f} µs/msg, {b / m:.2f}x")
        else:
            print(f"{k}: main {m / 1000:.1f} k/s, branch (trace off) {b / 1000:.1f} k/s, "
                  f"{b / m:.2f}x")


if __name__ == "__main__":
    main()
