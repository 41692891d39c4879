"""Client CPU per single send with the executor replaced by one that answers at once
(no I/O): what the client itself costs; run at old main, then at this branch."""

import asyncio
import socket
import subprocess
import tempfile
import time
import warnings

import rmq

warnings.simplefilter("ignore")
s = socket.socket()
s.bind(("127.0.0.1", 0))
port = s.getsockname()[1]
s.close()
d = tempfile.mkdtemp()
srv = subprocess.Popen(
    ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", d],
    stdout=subprocess.DEVNULL,
)
url = f"redis://127.0.0.1:{port}/0"
time.sleep(0.3)


def reply_for(call):
    a = call.args[4:]
    n = 0
    i = 0
    while i < len(a):
        k = a[i + 2]
        n += k
        i += 3 + k
    return [0] * n


async def fake(calls):
    await asyncio.sleep(0)
    return [reply_for(c) for c in calls]


def fake_sync(calls):
    return [reply_for(c) for c in calls]


async def main():
    async with rmq.AsyncClient(url, registry_ttl=3600, clock=lambda: 1767225600000) as a:
        await a.create_topic("a", slots=8)
        await a.topic("a")
        if getattr(a, "_commit", None) is not None:
            a._commit._execute = fake
        else:
            a._execute = fake

        async def sender(n):
            for i in range(40):
                await a.send("a", b"a%d-%d" % (n, i))

        best = 1e9
        for _ in range(3):
            p0 = time.process_time()
            await asyncio.gather(*(sender(n) for n in range(512)))
            best = min(best, (time.process_time() - p0) / (512 * 40) * 1e6)
        print(f"async 512 tasks, no I/O: {best:.2f} us cpu/send")
    c = rmq.Client(url, registry_ttl=3600, clock=lambda: 1767225600000)
    c.topic("a")
    if hasattr(c, "_commit"):
        c._commit._execute = fake_sync
    else:
        c._execute = fake_sync
    best = 1e9
    for _ in range(3):
        p0 = time.process_time()
        for i in range(20000):
            c.send("a", b"s%d" % i)
        best = min(best, (time.process_time() - p0) / 20000 * 1e6)
    print(f"sync 1 thread, no I/O: {best:.2f} us cpu/send")


try:
    asyncio.run(main())
finally:
    srv.terminate()
