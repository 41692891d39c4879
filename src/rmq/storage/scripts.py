"""Loads the Lua scripts, resolving their ``--- @include "name"`` lines.

Each script in ``lua/`` is one atomic state change; shared Lua lives in ``lua/includes/``
(as in BullMQ). An include is pasted once per script, in the order first named.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

__all__ = ["Script", "script"]

_INCLUDE = re.compile(r'^--- @include "([a-z_]+)"\s*$', re.MULTILINE)


def _read(relative: str) -> str:
    return resources.files("rmq.storage").joinpath(f"lua/{relative}").read_text("utf-8")


def _expand(source: str, seen: set[str]) -> str:
    def paste(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in seen:
            return ""
        seen.add(name)
        return _expand(_read(f"includes/{name}.lua"), seen)

    return _INCLUDE.sub(paste, source)


# "#!lua" declares a script with flags. Without `allow-oom`, Redis refuses a script whole
# when it is out of memory, instead of failing at its first write and leaving half a change:
# what sends and requeues want. Scripts that move messages along or out (claim, settle,
# recover, stats' promotion) are allowed, so consumers can drain a full Redis. On a single
# node `claim` reads every slot of a topic (strict priority) and `ack` settles every slot in
# one call, hence cross-slot keys.
_FLAGS: dict[str, tuple[str, ...]] = {
    "claim": ("allow-oom", "allow-cross-slot-keys"),
    "ack": ("allow-oom", "allow-cross-slot-keys"),
    "fail": ("allow-oom",),
    "release": ("allow-oom",),
    "recover": ("allow-oom",),
    "extend": ("allow-oom",),
    "stats": ("allow-oom",),
}


@dataclass(frozen=True, slots=True)
class Script:
    """A script's full source and the SHA1 that EVALSHA names it by."""

    name: str
    source: str
    sha: str


@cache
def script(name: str) -> Script:
    """The script ``lua/<name>.lua`` with its includes resolved."""
    flags = ",".join(_FLAGS.get(name, ()))
    source = f"#!lua{' flags=' + flags if flags else ''}\n" + _expand(_read(f"{name}.lua"), set())
    return Script(name, source, hashlib.sha1(source.encode()).hexdigest())
