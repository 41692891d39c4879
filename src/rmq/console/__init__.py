"""The RMQ web console (``rmq console``) and Prometheus metrics (``rmq metrics``).

An edge: it reads and changes the queue only through the public client (``rmq.Client``).
``create_app`` builds the ASGI application; ``serve`` runs it with uvicorn. The console
needs the ``console`` extra (FastAPI, uvicorn, Jinja2, prometheus-client).
"""

from .app import create_app
from .server import metrics_app, serve

__all__ = ["create_app", "metrics_app", "serve"]
