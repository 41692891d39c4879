"""Warnings from the library (``warnings.warn``) as the command line shows them: each one once
per user, not on every command.

Today these are the client's warnings about a server's configuration (it may evict queued
messages, or keeps nothing on disk); their text names the server, so "once per text" is once
per server and problem. Which ones were shown is remembered in ``warnings-shown`` in the RMQ
home (``$RMQ_HOME``, else ``~/.rmq``); deleting that file shows them again. Where the home
cannot be written, a warning is shown every time rather than never.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ..server import embedded_home

__all__ = ["show_once", "shown_file"]


def shown_file() -> Path:
    """The file that lists the warnings already shown to this user."""
    return embedded_home() / "warnings-shown"


def show_once(message: Any, *_: Any, **__: Any) -> None:
    """Print ``message`` as ``rmq: warning: ...`` on stderr unless this user saw it before
    (a ``warnings.showwarning`` replacement)."""
    text = " ".join(str(message).split())  # one line, as it is stored
    path = shown_file()
    try:
        if text in path.read_text(encoding="utf-8").splitlines():
            return
    except OSError:
        pass  # nothing shown yet
    print(f"rmq: warning: {text} (shown once per user; see docs/cli.md)", file=sys.stderr)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as shown:
            shown.write(text + "\n")
    except OSError:
        pass  # cannot remember it: then it is shown again next time, never lost
