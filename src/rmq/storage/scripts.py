"""Loads the Lua scripts, their flags and their ``--- @include "name"`` lines resolved, as
one Redis Functions library and, from the same assembly, as plain scripts.

Each script in ``lua/`` is one atomic state change; shared Lua lives in ``lua/includes/``
(as in BullMQ, whose ``script-loader.ts`` this follows). A script's first line declares its
flags (``#!lua flags=allow-oom`` or a bare ``#!lua``). Scripts and includes alike name the
includes they use, one ``--- @include "name"`` line each; an include's own includes come
before it, each include once. A script without flags, a cycle, a missing include or an
include named twice by one file stops the load with a :class:`ScriptSourceError` that names
the files.

A script whose writes are redone if lost (a promotion of due messages, judged by the server's
clock; a history bucket) says so on a line of its own, ``--- @housekeeping``: a client that
waits for replicas after each write (``client/replication.py``) does not wait after it, so
reading sizes never fails because a replica lags.

Why a library: a script sent by ``EVALSHA`` runs its whole chunk on every call, so every
include's local functions would be defined again for each call (measured: one send took 36.9 µs
of server time as a script, 32.4 µs as a function; 183 k against 151 k instructions). The
library defines them once, when it
loads; each script is a function of it, called by ``FCALL``. The library is named by the
SHA1 of its source (``rmq_<12 hex>``), so two RMQ versions on one server each call their
own, as ``EVALSHA`` names a script by its content.

Why plain scripts too: a user may be refused functions (``FCALL`` or ``FUNCTION LOAD``) but
granted ``EVALSHA``, a Redis out of memory refuses every load (where the scripts that only
move messages still run), and a server may predate functions; the client falls back to the
scripts then (``client/fallback.py``). A one-topic tenant gets neither: it calls the library
an administrator loaded (``FCALL``), since whoever may load a library may replace RMQ's and
whoever may ``EVAL`` may stall the server (docs/reliability.md, "Security").

The two forms differ only in their first lines. In the library, ``KEYS``, ``ARGV``, ``CALL``
(a fresh table per call: what an include keeps for the length of one call) and ``rcall``
(``redis.call``, which does not exist while a library loads) are upvalues that the function
Redis calls sets before it runs the script's body; as a script they are the globals and two
locals.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable

from ..errors import RMQError

__all__ = ["Library", "Script", "ScriptSourceError", "load_scripts", "script"]

# A script with a shebang is refused whole when it cannot run (out of memory, unless it
# allows that); one without runs until its first write fails, leaving half a change. So every
# script must say which it is, even with no flags. (Functions always behave so.)
_SHEBANG = re.compile(r"#!lua(?: flags=([a-z-]+(?:,[a-z-]+)*))?")
_INCLUDE = re.compile(r'--- @include "([a-z_]+)"')
# Anything that looks like an include but is not written as one would otherwise stay a
# comment, and its functions would be missing only when the script runs.
_LOOKS_LIKE_INCLUDE = re.compile(r"\s*-{2,}\s*@include\b")
_HOUSEKEEPING = re.compile(r"^--- @housekeeping$", re.MULTILINE)
_SCRIPT_NAME = re.compile(r"[a-z_]+")

_SCRIPT_PRELUDE = "local rcall = redis.call\nlocal CALL = {}\n"
_LIBRARY_PRELUDE = """\
local KEYS, ARGV, CALL, rcall

local function serve(body)
  return function(keys, args)
    KEYS, ARGV, CALL, rcall = keys, args, {}, redis.call
    return body()
  end
end
"""


class ScriptSourceError(RMQError):
    """A Lua script or include that cannot be assembled (a packaging fault, not bad input):
    the message names the files involved."""


@dataclass(frozen=True, slots=True)
class Library:
    """The Functions library that holds every script: ``FUNCTION LOAD`` takes ``source``."""

    name: str
    source: str


@dataclass(frozen=True, slots=True)
class Script:
    """One script: ``function`` is its name in the library (``FCALL``); ``source`` and
    ``sha`` are the same script whole, for ``EVAL`` and ``EVALSHA``. ``housekeeping``: its
    writes are redone if lost (module doc)."""

    name: str
    flags: tuple[str, ...]
    function: str
    source: str
    sha: str
    library: Library = field(repr=False)
    housekeeping: bool = False


@dataclass(frozen=True, slots=True)
class _Parsed:
    name: str
    shebang: str
    flags: tuple[str, ...]
    includes: list[str]  # paths under the directory, each after the includes it needs
    body: str


def load_scripts(directory: Traversable) -> dict[str, Script]:
    """Every script ``<directory>/<name>.lua``, by name, assembled into one library and as
    plain scripts. Raises :class:`ScriptSourceError` naming the files for a script without
    a shebang, an include cycle, an include that does not exist, or a file that names the
    same include twice."""
    names = sorted(f.name.removesuffix(".lua") for f in directory.iterdir()
                   if f.name.endswith(".lua") and f.is_file())
    for name in names:
        if not _SCRIPT_NAME.fullmatch(name):
            raise ScriptSourceError(f"{name}.lua: a script's name is lower case letters and _")
    texts: dict[str, str] = {}
    parsed = [_parse(directory, name, texts) for name in names]

    included: list[str] = []  # every include any script needs, each after its own includes
    for script in parsed:
        included += [path for path in script.includes if path not in included]
    code = "".join(texts[path] + "\n" for path in included)
    version = hashlib.sha1((code + "".join(s.body for s in parsed)
                            + repr([(s.name, s.flags) for s in parsed])).encode()).hexdigest()[:12]
    library_name = f"rmq_{version}"
    # Each script's body is registered in a block of its own: its function is no local of
    # the main chunk, where Lua allows 200 (the includes' top-level locals are there).
    bodies = "".join(
        f"\ndo\nlocal function run_{s.name}()\n{s.body}\nend\n"
        f"redis.register_function{{function_name = '{library_name}_{s.name}',"
        f" callback = serve(run_{s.name}), flags = {{{', '.join(repr(f) for f in s.flags)}}}}}\n"
        "end\n"
        for s in parsed)
    library = Library(library_name, f"#!lua name={library_name}\n{_LIBRARY_PRELUDE}{code}"
                                    f"{bodies}")

    scripts = {}
    for s in parsed:
        source = (s.shebang + "\n" + _SCRIPT_PRELUDE
                  + "".join(texts[path] + "\n" for path in s.includes) + s.body + "\n")
        scripts[s.name] = Script(s.name, s.flags, f"{library_name}_{s.name}", source,
                                 hashlib.sha1(source.encode()).hexdigest(), library,
                                 _HOUSEKEEPING.search(s.body) is not None)
    return scripts


@cache
def _shipped() -> dict[str, Script]:
    return load_scripts(resources.files("rmq.storage").joinpath("lua"))


def script(name: str) -> Script:
    """The shipped script ``lua/<name>.lua`` (the library assembled once per process)."""
    try:
        return _shipped()[name]
    except KeyError:
        raise ScriptSourceError(f"there is no script {name}.lua among the shipped scripts"
                                ) from None


def _parse(directory: Traversable, name: str, texts: dict[str, str]) -> _Parsed:
    path = f"{name}.lua"
    shebang, _, body = _read(directory, path, [path]).partition("\n")
    flags = _SHEBANG.fullmatch(shebang.rstrip())
    if not flags:
        raise ScriptSourceError(
            f"{path}:1: a script opens with its flags, '#!lua flags=allow-oom,...', or '#!lua'"
            f" for none (then Redis refuses it whole when out of memory); found {shebang!r}")
    includes: list[str] = []
    own = _strip_includes(directory, path, body, [path], includes, texts, 2)
    return _Parsed(name, shebang.rstrip(), tuple(flags.group(1).split(",")) if flags.group(1)
                   else (), includes, own)


def _strip_includes(directory: Traversable, path: str, text: str, chain: list[str],
                    includes: list[str], texts: dict[str, str], first_line: int = 1) -> str:
    """``text`` (the file ``path`` from ``first_line`` on, reached through ``chain``) without
    its include lines; the includes it names, and theirs before them, appended to
    ``includes`` unless already there."""
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
        if child not in includes:
            text_of_child = _read(directory, child, [*chain, child])
            if text_of_child.startswith("#!"):
                raise ScriptSourceError(f"{child}:1: an include has no '#!' line: flags"
                                        " belong to the script that runs")
            texts[child] = _strip_includes(directory, child, text_of_child, [*chain, child],
                                           includes, texts)
            includes.append(child)
    return "\n".join(lines)


def _read(directory: Traversable, path: str, chain: list[str]) -> str:
    file = directory.joinpath(*path.split("/"))
    if not file.is_file():
        if len(chain) == 1:
            raise ScriptSourceError(f"there is no script {path} in {directory}")
        raise ScriptSourceError(f"{' -> '.join(chain[:-1])} includes {path}, which does not exist")
    return file.read_text("utf-8")
