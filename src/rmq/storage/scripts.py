"""Loads the Lua scripts: their flags, and their ``--- @include "name"`` lines resolved.

Each script in ``lua/`` is one atomic state change; shared Lua lives in ``lua/includes/``
(as in BullMQ, whose ``script-loader.ts`` this follows). A script's first line declares its
flags to Redis (``#!lua flags=allow-oom`` or a bare ``#!lua``) and stays its first line.
Scripts and includes alike name the includes they use, one ``--- @include "name"`` line
each. The loader replaces that line with ``includes/name.lua``, resolved the same way, the
first time a script names it, and drops it after that: each include is pasted once per
script, its own includes before its code. A script without flags, a cycle, a missing
include or an include named twice by one file stops the load with a
:class:`ScriptSourceError` that names the files.
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

# A script with a shebang is refused whole when it cannot run (out of memory, unless it
# allows that); one without runs until its first write fails, leaving half a change. So every
# script must say which it is, even with no flags.
_SHEBANG = re.compile(r"#!lua(?: flags=[a-z-]+(?:,[a-z-]+)*)?")
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


def load_script(directory: Traversable, name: str) -> Script:
    """The script ``<directory>/<name>.lua`` as Redis runs it: every include it needs,
    directly or through other includes, pasted exactly once, each before the code that
    names it, under the script's own first line, its shebang (``#!lua`` and its flags).
    Raises :class:`ScriptSourceError` naming the files for a script without a shebang, an
    include cycle, an include that does not exist, or a file that names the same include
    twice."""
    path = f"{name}.lua"
    shebang, _, body = _read(directory, path, [path]).partition("\n")
    if not _SHEBANG.fullmatch(shebang.rstrip()):
        raise ScriptSourceError(
            f"{path}:1: a script opens with its flags, '#!lua flags=allow-oom,...', or '#!lua'"
            f" for none (then Redis refuses it whole when out of memory); found {shebang!r}")
    source = shebang.rstrip() + "\n" + _Assembly(directory).paste(path, body, [path], 2) + "\n"
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

    def paste(self, path: str, text: str, chain: list[str], first_line: int = 1) -> str:
        """``text`` (the file ``path`` from ``first_line`` on, reached through ``chain``)
        with its include lines replaced by the includes not pasted yet."""
        lines: list[str] = []
        first_named: dict[str, int] = {}
        for number, line in enumerate(text.splitlines(), start=first_line):
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
                raise ScriptSourceError(f"include cycle: {cycle} (reached from {chain[0]})")
            if child not in self._pasted:
                self._pasted.add(child)
                included = _read(self._directory, child, [*chain, child])
                if included.startswith("#!"):
                    raise ScriptSourceError(f"{child}:1: an include has no '#!' line: flags"
                                            " belong to the script that runs")
                lines.append(self.paste(child, included, [*chain, child]))
        return "\n".join(lines)
