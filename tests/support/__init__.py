"""What the tests run beside RMQ: fixtures of real Redis servers (``servers.py``), each
master behind a test's ``redis_url`` (``nodes.py``) and the TLS material of the TLS server
(``tls.py``). A Redis Cluster comes from ``rmq.server.cluster``."""
