"""routerctl: ask a running router (tnwgd) what it is doing, reload it, stop it.

    routerctl [-n NAME | -s ENDPOINT] [--json] [--timeout S] COMMAND [PORTAL]

Exit status: 0 ok; 1 the router cannot be reached (the message names the endpoint tried);
2 usage (including: several routers run and none was named); 3 the router reported an error;
130 interrupted (Ctrl-C); 141 the output's reader left (`routerctl topics | head`).
With exactly one router running, no -n or -s is needed; without a COMMAND, `status`.
"""
from __future__ import annotations

import argparse
import ipaddress
import json
import sys

from router.admin.client import Ambiguous, Unreachable, find_endpoint, request
from router.admin.commands import commands
from router.admin.protocol import Errno
from router.cli.common import at_least, exits_quietly
from router.hostnames import is_host_name

EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, EXIT_DAEMON_ERROR = 0, 1, 2, 3

# ZeroMQ waits for a reply a whole number of milliseconds in a C int (about 24 days): a day is
# longer than anyone waits on a prompt, and far inside that.
MAX_TIMEOUT = 86_400.0
_timeout = at_least(0.0, float, above=True, at_most=MAX_TIMEOUT)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="routerctl", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("-n", "--name", help="the router's <daemon><name> (default: the only one running)")
    where.add_argument("-s", "--socket", metavar="ENDPOINT", type=_endpoint,
                       help="admin endpoint, e.g. ipc:///run/umrouter/two-lans.admin or tcp://127.0.0.1:5600")
    parser.add_argument("--json", action="store_true", help="print the reply's data as JSON")
    parser.add_argument("--timeout", type=_timeout, default=5.0, metavar="S",
                        help="seconds to wait for the reply (default 5)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in commands().items():
        command_parser = sub.add_parser(name, help=command.summary, description=command.description,
                                        formatter_class=argparse.RawDescriptionHelpFormatter)
        for argument in command.arguments:
            command_parser.add_argument(argument.name, help=argument.help,
                                        nargs=None if argument.required else "?")
        # Also after the command (`routerctl stats LAN1 --json`); SUPPRESS keeps the global value.
        command_parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        command_parser.add_argument("--timeout", type=_timeout, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return parser


def _endpoint(text: str) -> str:
    """An admin endpoint routerctl can connect to: ipc://PATH or tcp://HOST:PORT. Anything else is
    a usage error (exit 2), not a router that cannot be reached (exit 1)."""
    scheme, _, address = text.partition("://")
    if scheme == "ipc" and address:
        return text
    if scheme == "tcp":
        host, _, port = address.rpartition(":")
        if _connectable_host(host) and port.isdigit() and 0 < int(port) < 65536:
            return text
    raise argparse.ArgumentTypeError(f"not an admin endpoint: {text!r} (ipc://PATH or tcp://HOST:PORT)")


def _connectable_host(host: str) -> bool:
    """A host a client connects to: a name, an IPv4 address, or an IPv6 one in brackets (not
    ZeroMQ's "*", which only a server binds, nor text it cannot parse and waits on forever)."""
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
            return True
        except ValueError:
            return False
    return is_host_name(host)


@exits_quietly
def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:            # `routerctl` alone: what `systemctl` alone is, an overview
        args.command = "status"
    command = commands()[args.command]
    props = {a.name: getattr(args, a.name) for a in command.arguments if getattr(args, a.name) is not None}
    try:
        endpoint = find_endpoint(args.name, args.socket)
        reply = request(endpoint, args.command, props, args.timeout)
    except Unreachable as err:
        print(f"routerctl: {err}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except Ambiguous as err:
        print(f"routerctl: {err}", file=sys.stderr)
        return EXIT_USAGE
    if reply.get("status") != "ok":
        return _report_error(args, reply)
    data = reply.get("data")
    print(json.dumps(data, indent=2) if args.json else command.render(data))
    return EXIT_OK


def _report_error(args, reply: dict) -> int:
    errno = reply.get("errno")
    try:
        label = Errno(errno).name
    except ValueError:
        label = "UNKNOWN"
    print(f"routerctl: {args.command}: {reply.get('reason')} (errno {errno} {label})", file=sys.stderr)
    if args.json:
        print(json.dumps({"errno": errno, "error": label, "reason": reply.get("reason")}, indent=2))
    return EXIT_DAEMON_ERROR


if __name__ == "__main__":
    sys.exit(main())
