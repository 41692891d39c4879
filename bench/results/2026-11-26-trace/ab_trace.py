import sys, time, redis, rmq
from rmq.server import RedisServer
n = 50000
res = {}
with RedisServer(appendonly=False) as server:
    c = rmq.Client(server.url); r = redis.Redis.from_url(server.url)
    bodies = [b"t-%09d-" % i + b"x" * 88 for i in range(n)]
    for rnd in range(3):
        for traced in (False, True):
            for t in c.topics(): c.delete_topic(t)
            c.create_topic("t", trace=traced)
            for i in range(0, n, 500): c.send_many("t", bodies[i:i+500])
            r.config_resetstat()
            a = time.perf_counter()
            for i in range(0, n, 500): c.send_many("t", bodies[i:i+500])
            ws = time.perf_counter() - a
            s1 = sum(v["usec"] for k, v in r.info("commandstats").items() if k.startswith("cmdstat_fcall"))
            r.config_resetstat()
            a = time.perf_counter()
            while True:
                b = c.claim("t", count=100)
                if not b: break
                c.ack(b)
            wc = time.perf_counter() - a
            s2 = sum(v["usec"] for k, v in r.info("commandstats").items() if k.startswith("cmdstat_fcall"))
            res.setdefault(traced, []).append((s1 / n, n / ws, s2 / n, n / wc))
for traced, rows in res.items():
    print("trace", "on " if traced else "off", " | ".join("send %.2fus %.0fk/s claim+ack %.2fus %.0fk/s" % (a, b / 1000, c, d / 1000) for a, b, c, d in rows))
