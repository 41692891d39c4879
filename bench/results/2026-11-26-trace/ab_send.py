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
            for i in range(0, n, 500): c.send_many("t", bodies[i:i+500])
            s1 = sum(v["usec"] for k, v in r.info("commandstats").items() if k.startswith("cmdstat_fcall"))
            res.setdefault(traced, []).append(s1 / n)
print(" ".join("%s %s" % ("on" if k else "off", " ".join("%.2f" % v for v in vs)) for k, vs in res.items()))
