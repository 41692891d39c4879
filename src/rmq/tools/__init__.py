"""Tools built on RMQ, not part of the library: the benchmark (``rmq bench``), fault injection
(``rmq chaos``), the founding-case demo (``rmq demo``) and the servers the tools and tests
start (a Redis Cluster, TLS material). The library never imports them."""
