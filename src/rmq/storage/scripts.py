"""Loads the Lua scripts, resolving their ``--- @include "name"`` lines.

Each script in ``lua/`` is one atomic state change; shared Lua lives in ``lua/includes/``
(as in BullMQ, whose ``script-loader.ts`` this follows). Scripts and includes alike name
the includes they use, one ``--- @include "name"`` line each. The loader replaces that line
with ``includes/name.lua``, resolved the same way, the first time a script names it, and
drops it after that: each include is pasted once per script, its own includes before its
code. A cycle, a missing include or an include named twice by one file stops the load with
a :class:`ScriptSourceError` that names the files.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable

from ..errors import RMQError

__all__ = ["Script", "ScriptSourceError", "load_script", "script"]

_INCLUDE = re.compile(r'--- @include "([a-z_]+)"')
# Anything that looks like an include but is not written as one would otherwise stay a
# comment, and its functions would be missing only when the script runs.
_LOOKS_LIKE_INCLUDE = re.compile(r"\s*-{2,}\s*@include\b")


class ScriptSourceError(RMQError):
    """A Lua script or include that cannot be assembled (a packaging fault, not bad input):
    the message names the files involved."""


@dataclass(frozen=True, slots=True)
class Script:
    """A script's full source and the SHA1 that EVALSHA names it by."""

    name: str
    source: str
    sha: str


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


def load_script(directory: Traversable, name: str) -> Script:
    """The script ``<directory>/<name>.lua`` as Redis runs it: every include it needs,
    directly or through other includes, pasted exactly once, each before the code that
    names it. Raises :class:`ScriptSourceError` naming the files for an include cycle, an
    include that does not exist, or a file that names the same include twice."""
    path = f"{name}.lua"
    body = _Assembly(directory).paste(path, _read(directory, path, [path]), [path])
    flags = ",".join(_FLAGS.get(name, ()))
    source = f"#!lua{' flags=' + flags if flags else ''}\n" + body + "\n"
    return Script(name, source, hashlib.sha1(source.encode()).hexdigest())


@cache
def script(name: str) -> Script:
    """The shipped script ``lua/<name>.lua`` with its includes resolved (loaded once)."""
    return load_script(resources.files("rmq.storage").joinpath("lua"), name)


def _read(directory: Traversable, path: str, chain: list[str]) -> str:
    file = directory.joinpath(*path.split("/"))
    if not file.is_file():
        if len(chain) == 1:
            raise ScriptSourceError(f"there is no script {path} in {directory}")
        raise ScriptSourceError(f"{' -> '.join(chain[:-1])} includes {path}, which does not exist")
    return file.read_text("utf-8")


class _Assembly:
    """One script's assembly: which includes are already pasted."""

    def __init__(self, directory: Traversable):
        self._directory = directory
        self._pasted: set[str] = set()

    def paste(self, path: str, text: str, chain: list[str]) -> str:
        """``text`` (the file ``path``, reached through ``chain``) with its include lines
        replaced by the includes not pasted yet."""
        lines: list[str] = []
        first_named: dict[str, int] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            include = _INCLUDE.fullmatch(line.rstrip())
            if include is None:
                if _LOOKS_LIKE_INCLUDE.match(line):
                    raise ScriptSourceError(
                        f'{path}:{number}: malformed include {line.strip()!r}; write'
                        f' --- @include "name" for includes/name.lua')
                lines.append(line)
                continue
            name = include.group(1)
            if name in first_named:
                raise ScriptSourceError(
                    f'{path}:{number}: includes "{name}" a second time'
                    f" (already on line {first_named[name]})")
            first_named[name] = number
            child = f"includes/{name}.lua"
            if child in chain:
                cycle = " -> ".join([*chain[chain.index(child):], child])
                raise ScriptSourceError(f"include cycle: {cycle}")
            if child not in self._pasted:
                self._pasted.add(child)
                lines.append(self.paste(child, _read(self._directory, child, [*chain, child]),
                                        [*chain, child]))
        return "\n".join(lines)
