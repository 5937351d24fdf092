"""routerctl's side of the admin socket: find a router's endpoint and ask it one thing.

A router binds `<runtime dir>/<name>.admin`. The daemon picks the first usable runtime directory
(router/runtime.py); routerctl may run as another user, for whom that directory is not the first
usable one, so it looks in every place a daemon could have chosen. `$RUNTIME_DIRECTORY`, when
set, is the only place looked at (systemd sets it for the service; tests set it to stay private).
"""
from __future__ import annotations

import itertools
import os
import socket
import tempfile
import time
from pathlib import Path

import zmq

from router.admin.protocol import decode_reply, encode_request

SUFFIX = ".admin"
_ids = itertools.count(1)


class Unreachable(Exception):
    """No answer: the message says what was tried and what to check."""


class Ambiguous(Exception):
    """Several routers are running and none was named."""


def search_dirs() -> list[Path]:
    if os.environ.get("RUNTIME_DIRECTORY"):
        return [Path(os.environ["RUNTIME_DIRECTORY"].split(":")[0])]
    dirs = [Path("/run/umrouter")]
    if os.environ.get("XDG_RUNTIME_DIR"):
        dirs.append(Path(os.environ["XDG_RUNTIME_DIR"]) / "umrouter")
    dirs.append(Path(tempfile.gettempdir()) / f"umrouter-{os.getuid()}")
    return dirs


def endpoint_for(name: str) -> str:
    """The endpoint of the router called `name`: the first directory that has its socket."""
    dirs = search_dirs()
    for directory in dirs:
        if (directory / f"{name}{SUFFIX}").exists():
            return f"ipc://{directory / (name + SUFFIX)}"
    raise Unreachable(f"no admin socket for a router named '{name}' in {', '.join(map(str, dirs))}; "
                      f"is tnwgd running with <name>{name}</name> (or a configuration file {name}.xml)?")


def running_routers() -> dict[str, str]:
    """name -> endpoint of every router whose socket answers a connection (stale files skipped)."""
    return _scan()[0]


def _scan() -> tuple[dict[str, str], list[Path]]:
    """The routers whose sockets answer, and the sockets this user may not connect to: those are
    routers too (a stale file refuses instead), run by another user."""
    found: dict[str, str] = {}
    denied: list[Path] = []
    for directory in search_dirs():
        try:
            paths = sorted(directory.glob(f"*{SUFFIX}"))
        except OSError:
            continue
        for path in paths:
            name = path.name[:-len(SUFFIX)]
            if name in found:
                continue
            try:
                if _listening(path):
                    found[name] = f"ipc://{path}"
            except PermissionError:
                denied.append(path)
    return found, denied


def find_endpoint(name: str | None, endpoint: str | None) -> str:
    if endpoint:
        return endpoint
    if name:
        return endpoint_for(name)
    routers, denied = _scan()
    if len(routers) == 1:
        return next(iter(routers.values()))
    if not routers and denied:
        raise Unreachable(f"permission denied on {', '.join(map(str, denied))}: run routerctl as the router's "
                          "user (sudo -u umrouter routerctl ...) or as root")
    if not routers:
        raise Unreachable(f"no running router found in {', '.join(map(str, search_dirs()))}; "
                          "start tnwgd (systemctl start umrouter@NAME), or name one with -n NAME or -s ENDPOINT")
    raise Ambiguous(f"several routers are running ({', '.join(sorted(routers))}); choose one with -n NAME")


def _listening(path: Path) -> bool:
    """Whether a process listens on this socket file; PermissionError when this user may not
    connect to it."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(0.5)
    try:
        probe.connect(str(path))
        return True
    except PermissionError:
        raise
    except OSError:
        return False
    finally:
        probe.close()


def _check_socket_file(endpoint: str) -> None:
    """Fail at once, with the reason, where ZeroMQ would only wait (it connects in the background)."""
    if not endpoint.startswith("ipc://") or endpoint.startswith("ipc://@"):
        return
    path = endpoint[len("ipc://"):]
    if not os.path.exists(path):
        raise Unreachable(f"no admin socket at {path}: the router is not running "
                          "(or runs under another name or runtime directory)")
    if not os.access(path, os.R_OK | os.W_OK):
        raise Unreachable(f"permission denied on {path}: run routerctl as the router's user "
                          "(sudo -u umrouter routerctl ...) or as root")


def request(endpoint: str, command: str, props: dict | None = None, timeout: float = 5.0) -> dict:
    """Send one request and wait for its reply; raises Unreachable with a hint on no answer."""
    _check_socket_file(endpoint)
    context = zmq.Context.instance()
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(endpoint)
        request_id = next(_ids)
        sock.send(encode_request(request_id, command, props))
        deadline = time.monotonic() + timeout
        while sock.poll(max(0, int((deadline - time.monotonic()) * 1000)), zmq.POLLIN):
            payload = sock.recv()
            try:
                reply = decode_reply(payload)
            except Exception as err:      # msgpack raises several kinds: something else answers there
                raise Unreachable(f"{endpoint} answered with something that is not a router's admin reply "
                                  f"({type(err).__name__}: {err}); is -s/-n naming a router?") from None
            if reply.get("id") in (request_id, None):
                return reply
        raise Unreachable(f"no answer from {endpoint} within {timeout:g} s: is the router running, "
                          "and may this user open its socket? (try --timeout, or check the router's log)")
    except zmq.ZMQError as err:
        raise Unreachable(f"cannot connect to {endpoint}: {err}") from None
    finally:
        sock.close()
