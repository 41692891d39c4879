"""The founding-case demo (SPEC §8): ``rmq demo``, ``python -m rmq.demo``."""

from .app import main

__all__ = ["main"]
