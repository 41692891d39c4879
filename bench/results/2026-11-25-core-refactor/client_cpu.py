"""Client CPU per operation (process time) and round trips per send, against a
redis-server of its own: run with PYTHONPATH at old main, then at this branch."""

import asyncio
import json
import socket
import subprocess
import tempfile
import threading
import time

import rmq


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


port = free_port()
d = tempfile.mkdtemp()
srv = subprocess.Popen(
    ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", d],
    stdout=subprocess.DEVNULL,
)
url = f"redis://127.0.0.1:{port}/0"
out = {}
try:
    for _ in range(100):
        try:
            c = rmq.Client(url, registry_ttl=3600)
            break
        except Exception:
            time.sleep(0.05)
    import warnings

    warnings.simplefilter("ignore")
    calls = [0]
    raw = c._execute

    def counting(batch):
        calls[0] += 1
        return raw(batch)

    c._execute = counting
    if hasattr(c, "_commit"):
        c._commit._execute = counting
    c.create_topic("s", slots=8)
    c.topic("s")
    N = 10000
    t0, p0 = time.perf_counter(), time.process_time()
    for i in range(N):
        c.send("s", b"m%d" % i)
    out["send 1 thread: us cpu/op"] = (time.process_time() - p0) / N * 1e6
    out["send 1 thread: us wall/op"] = (time.perf_counter() - t0) / N * 1e6
    c.create_topic("t", slots=8)
    c.topic("t")
    calls[0] = 0
    T, M = 32, 300

    def sender(n):
        for i in range(M):
            c.send("t", b"t%d-%d" % (n, i))

    threads = [threading.Thread(target=sender, args=(n,)) for n in range(T)]
    t0, p0 = time.perf_counter(), time.process_time()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    out["send 32 threads: us cpu/op"] = (time.process_time() - p0) / (T * M) * 1e6
    out["send 32 threads: us wall/op"] = (time.perf_counter() - t0) / (T * M) * 1e6
    out["send 32 threads: sends per round trip"] = T * M / calls[0]
    # claim+ack
    c.create_topic("c", slots=8)
    c.send_many("c", [b"c%d" % i for i in range(20000)])
    t0, p0 = time.perf_counter(), time.process_time()
    got = 0
    while True:
        ms = c.claim("c", count=100)
        if not ms:
            break
        c.ack(ms)
        got += len(ms)
    out["claim+ack 8 slots: us cpu/msg"] = (time.process_time() - p0) / got * 1e6
    out["claim+ack 8 slots: us wall/msg"] = (time.perf_counter() - t0) / got * 1e6
    c.create_topic("h", slots=256)
    c.send_many("h", [b"h%d" % i for i in range(20000)])
    t0, p0 = time.perf_counter(), time.process_time()
    got = 0
    while True:
        ms = c.claim("h", count=100)
        if not ms:
            break
        c.ack(ms)
        got += len(ms)
    out["claim+ack 256 slots (heads): us cpu/msg"] = (time.process_time() - p0) / got * 1e6
    out["claim+ack 256 slots (heads): us wall/msg"] = (time.perf_counter() - t0) / got * 1e6
    c.close()

    async def tasks():
        async with rmq.AsyncClient(url, registry_ttl=3600) as a:
            await a.create_topic("a", slots=8)
            await a.topic("a")
            acalls = [0]
            raw = a._execute

            async def counting(batch):
                acalls[0] += 1
                return await raw(batch)

            if hasattr(a, "_commit") and a._commit is not None:
                a._commit._execute = counting
            else:
                a._execute = counting
            K, M = 512, 20

            async def sender(n):
                for i in range(M):
                    await a.send("a", b"a%d-%d" % (n, i))

            t0, p0 = time.perf_counter(), time.process_time()
            await asyncio.gather(*(sender(n) for n in range(K)))
            out["send 512 tasks: us cpu/op"] = (time.process_time() - p0) / (K * M) * 1e6
            out["send 512 tasks: us wall/op"] = (time.perf_counter() - t0) / (K * M) * 1e6
            out["send 512 tasks: sends per round trip"] = K * M / acalls[0]

    asyncio.run(tasks())
finally:
    srv.terminate()
    srv.wait()
print(json.dumps(out))
