import sys, time, redis, rmq
from rmq.server import RedisServer
n = int(sys.argv[1]); traced = sys.argv[2] == "on"
with RedisServer(appendonly=False) as server:
    c = rmq.Client(server.url); r = redis.Redis.from_url(server.url)
    c.create_topic("t", trace=traced)
    bodies = [b"t-%09d-" % i + b"x" * 88 for i in range(n)]
    for i in range(0, n, 500): c.send_many("t", bodies[i:i+500])
    r.config_resetstat()
    for i in range(0, n, 500): c.send_many("t", bodies[i:i+500])
    stats_send = r.info("commandstats")
    r.config_resetstat()
    t = time.perf_counter()
    while True:
        b = c.claim("t", count=100)
        if not b: break
        c.ack(b)
    el = time.perf_counter() - t
    stats = r.info("commandstats")
    def show(st, label):
        tot = sum(v["usec"] for k, v in st.items() if k.startswith("cmdstat_fcall"))
        print(label, "fcall usec/msg %.2f" % (tot / n))
        for k, v in sorted(st.items(), key=lambda kv: -kv[1]["usec"])[:12]:
            print("  %-28s calls %8d usec %9d per_call %.2f" % (k, v["calls"], v["usec"], v["usec_per_call"]))
    show(stats_send, "send_many (merging)")
    show(stats, "claim+ack %.0f msg/s" % (n / el))
