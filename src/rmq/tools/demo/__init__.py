"""The founding-case demo (SPEC §8): ``rmq demo``, ``python -m rmq.tools.demo``."""

from .app import main

__all__ = ["main"]
