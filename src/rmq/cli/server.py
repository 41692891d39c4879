"""``rmq server [start|status|stop]``: the embedded Redis server (``rmq.server.embedded``).

``rmq server`` alone is ``rmq server start``: the server in the foreground until Ctrl-C, as
before the actions existed. ``start --detach`` starts it in the background, as a client
without a URL does. ``status`` exits 0 when it runs and 3 when it does not (the LSB's
``status`` convention), so scripts can test it.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..errors import RMQError
from ..server import EmbeddedStatus, RedisServer, embedded_status, ensure_embedded, stop_embedded
from .common import CommandError, age, print_json

__all__ = ["add_parsers"]

NOT_RUNNING = 3  # exit status of `status` when no server runs


def _data_dir(args: argparse.Namespace) -> str | None:
    return getattr(args, "data_dir", None)


def _command(action: str, args: argparse.Namespace) -> str:
    """The command line that does ``action`` on this data directory."""
    where = _data_dir(args)
    return f"`rmq server {action}{f' --data-dir {where}' if where else ''}`"


def _how_started(status: EmbeddedStatus) -> str:
    return "in the background" if status.daemon else "in the foreground of an `rmq server`"


def _where(status: EmbeddedStatus) -> str:
    tcp = f" and redis://127.0.0.1:{status.tcp_port}" if status.tcp_port else ""
    return f"{status.url}{tcp}"


def _note_client_url() -> None:
    url = os.environ.get("RMQ_REDIS_URL")
    if url:
        print(f"note: RMQ_REDIS_URL is set, so clients without --url use {url}, not the "
              "embedded server", file=sys.stderr)


def status(args: argparse.Namespace) -> int:
    found = embedded_status(_data_dir(args))
    if args.json:
        print_json(found.to_dict())
    elif found.running:
        assert found.used_memory is not None and found.uptime_seconds is not None
        print(f"embedded server: running (pid {found.pid}, {_how_started(found)})")
        print(f"  url      {_where(found)}")
        print(f"  data     {found.data_dir}")
        print(f"  log      {found.log_path}")
        print(f"  version  {found.version}")
        print(f"  memory   {found.used_memory / 2**20:.1f} MiB used, {found.keys} keys")
        print(f"  uptime   {age(found.uptime_seconds * 1000)}")
        print(f"stop it with {_command('stop', args)}")
    elif found.state == "not answering":
        print(f"embedded server: not answering (pid {found.pid} is alive but does not answer "
              f"on {found.url}; its log: {found.log_path}); {_command('stop', args)} stops it")
    else:
        print(f"embedded server: not running (data directory {found.data_dir}); "
              f"{_command('start', args)} runs it in the foreground, and a client without a "
              "URL starts it in the background")
    _note_client_url()
    return 0 if found.running else NOT_RUNNING


def stop(args: argparse.Namespace) -> None:
    stopped = stop_embedded(_data_dir(args))
    if stopped is None:
        home = embedded_status(_data_dir(args)).data_dir
        print(f"no embedded server runs in {home}; nothing to stop")
        return
    print(f"stopped the embedded server (pid {stopped.pid}); its data stays in "
          f"{stopped.data_dir}")


def start(args: argparse.Namespace) -> None:
    port, fsync = getattr(args, "port", 0), getattr(args, "fsync", "everysec")
    found = embedded_status(_data_dir(args))
    if found.state == "not answering":
        raise CommandError(f"the embedded server in {found.data_dir} (pid {found.pid}) is "
                           f"alive but does not answer; stop it with {_command('stop', args)}")
    if getattr(args, "detach", False):
        _start_detached(args, found, port, fsync)
        return
    if found.running:
        raise CommandError(f"the embedded server already runs in {found.data_dir} (pid "
                           f"{found.pid}, {_how_started(found)}); clients use it as it is; to "
                           f"run it here in the foreground, first stop it with "
                           f"{_command('stop', args)}")
    process = RedisServer(port, unixsocket=found.data_dir / "redis.sock",
                          data_dir=found.data_dir, appendfsync=fsync)
    where = process.url + (f" and redis://127.0.0.1:{port}" if port else "")
    print(f"rmq server: data in {process.data_dir}, serving {where}; Ctrl-C stops it",
          file=sys.stderr, flush=True)
    _note_client_url()
    try:
        code = process.run_foreground()
    except RMQError as exc:
        # The error ends with the log's tail, whose last line says why (a port in use...).
        first, *log = str(exc).splitlines()
        reason = f" {log[-1].strip()}" if log else ""
        raise CommandError(f"{first}{reason} (log: {process.log_path})") from None
    if code not in (0, None):
        raise CommandError(f"the server exited with status {code} (log: {process.log_path})")
    print("rmq server: stopped", file=sys.stderr)


def _start_detached(args: argparse.Namespace, found: EmbeddedStatus, port: int,
                    fsync: str) -> None:
    if found.running:
        print(f"the embedded server already runs (pid {found.pid}): {_where(found)}")
        return
    ensure_embedded(_data_dir(args), port=port, appendfsync=fsync)
    started = embedded_status(_data_dir(args))
    print(f"started the embedded server in the background (pid {started.pid}): "
          f"{_where(started)}; data and log in {started.data_dir}; "
          f"{_command('stop', args)} stops it")


def run(args: argparse.Namespace) -> int | None:
    if args.url:
        raise CommandError("--url does not apply: `rmq server` manages the embedded server "
                           "(choose its directory with --data-dir)")
    action = args.action or "start"
    if action != "start":
        misplaced = [f"--{name}" for name in ("port", "fsync", "detach") if hasattr(args, name)]
        if misplaced:
            raise CommandError(f"{', '.join(misplaced)} applies to `rmq server start` only")
    return {"start": start, "status": status, "stop": stop}[action](args)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is from 1 to 65535 (0: none), got {value}")
    return value


def _data_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", metavar="DIR", default=argparse.SUPPRESS,
                        help="data directory (default: $RMQ_HOME, else ~/.rmq)")


def _start_options(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS: `rmq server --port 6400` and `rmq server start --port 6400` both work, and a
    # value given to one parser is not overwritten by the other's default.
    _data_dir_option(parser)
    parser.add_argument("--port", type=_port, default=argparse.SUPPRESS, metavar="PORT",
                        help="also listen on 127.0.0.1:PORT (default: unix socket only)")
    parser.add_argument("--fsync", choices=["always", "everysec"], default=argparse.SUPPRESS,
                        help="appendfsync: 'always' loses nothing on a crash, 'everysec' "
                             "(default) at most a second")
    parser.add_argument("--detach", action="store_true", default=argparse.SUPPRESS,
                        help="start it in the background and return (as a client without a "
                             "URL does); it runs until `rmq server stop`")


def add_parsers(commands: Any) -> None:
    p = commands.add_parser(
        "server", help="run, show or stop the embedded Redis server",
        description="The Redis server that clients without a URL use: a unix socket in the "
                    "data directory, append-only persistence. A client without a URL starts "
                    "it in the background and it keeps running after the client exits; "
                    "`rmq server status` shows it, `rmq server stop` stops it. `rmq server` "
                    "alone runs it in the foreground until Ctrl-C (like `rmq server start`).")
    _start_options(p)
    p.set_defaults(run=run, action=None)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    _start_options(actions.add_parser(
        "start", help="run it in the foreground until Ctrl-C (the default), or --detach",
        description="Run the embedded server in the foreground until Ctrl-C or SIGTERM, or "
                    "in the background with --detach."))
    shown = actions.add_parser(
        "status", help="show whether it runs, its pid, URL, data directory, log and size",
        description="Show whether the embedded server runs, its pid, URL, data directory, "
                    "log, version, memory and keys. Exits 0 if it runs, 3 if not.")
    _data_dir_option(shown)
    shown.add_argument("--json", action="store_true", help="print JSON")
    _data_dir_option(actions.add_parser(
        "stop", help="stop it cleanly (its data stays on disk)",
        description="Stop the embedded server cleanly (SIGTERM: its append-only file is "
                    "flushed) and wait until it has exited. Its data stays on disk."))
