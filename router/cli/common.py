"""What the command-line tools share: number arguments, quiet exits on Ctrl-C and closed pipes, and, for the
example tools, the -c flag, logging, and stopping cleanly on SIGINT/SIGTERM."""
from __future__ import annotations

import argparse
import functools
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Callable

# The UM library is imported where a tool opens a context, not here: routerctl parses its arguments
# with this module and starts in a fraction of the second the library takes to import.
if TYPE_CHECKING:
    from router.um.context import Context

_JOIN_MARGIN = 0.5           # a multicast join and the first datagrams, after the join settles


def at_least(minimum, kind=int, *, above: bool = False, at_most=None):
    """An argparse type: a number of `kind` no smaller than `minimum` (greater than it when
    `above`) and no greater than `at_most`, else a usage error (exit 2) naming the bound, not a
    negative count or rate that would run as something else. A float must be finite: "nan" passes
    every comparison and "inf" is no count, rate or number of seconds."""
    def convert(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {'an integer' if kind is int else 'a number'}: {text}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"not a finite number: {text}")
        if value < minimum or (above and value == minimum):
            raise argparse.ArgumentTypeError(f"must be {'greater than' if above else 'at least'} {minimum}: {text}")
        if at_most is not None and value > at_most:
            raise argparse.ArgumentTypeError(f"must be at most {at_most}: {text}")
        return value
    return convert


def exits_quietly(main: Callable[..., int]) -> Callable[..., int]:
    """A command's main: Ctrl-C exits 130 and a reader that leaves early (`| head`) exits as if
    SIGPIPE had killed it (141), as other command-line tools do, without a Python traceback. Its
    output is flushed here, so a closed pipe is seen here too and not by Python's flush at exit."""
    @functools.wraps(main)
    def run(*args, **kwargs) -> int:
        try:
            try:
                return main(*args, **kwargs)
            finally:            # usage and --help leave by SystemExit, with their output buffered
                sys.stdout.flush()
        except KeyboardInterrupt:
            return 128 + signal.SIGINT
        except BrokenPipeError:
            # What is still buffered can go nowhere: stdout becomes /dev/null so that the flush at
            # exit succeeds instead of printing "Exception ignored".
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
            return 128 + signal.SIGPIPE
    return run


def add_context_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", action="append", default=[], metavar="CFG",
                        help="UM configuration file (plain text); may be given more than once")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the library does")


def setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def add_wait_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-W", "--wait-receivers", type=at_least(0), default=1, metavar="N",
                        help="wait until N receivers have joined before sending (0: do not wait)")
    parser.add_argument("--wait-timeout", type=at_least(0.0, float), default=60.0, metavar="S")


def wait_for_route(context, target, args: argparse.Namespace, stop: threading.Event, tool: str) -> bool:
    """A unicast target (router.um.unicast_immediate.UimTarget) in another domain: wait, up to
    --wait-timeout, until a router in this domain says it reaches that domain; False, with a
    message, if it did not."""
    deadline = time.monotonic() + args.wait_timeout
    while target.domain is not None and target.domain != context.domain_id \
            and context.resolver.domain_routes.router_for(target.domain) is None:
        if stop.is_set() or time.monotonic() >= deadline:
            print(f"{tool}: no router in this domain said it reaches domain {target.domain} within "
                  f"{args.wait_timeout:g} s", file=sys.stderr)
            return False
        stop.wait(0.05)
    return True


def wait_for_receivers(source, args: argparse.Namespace, stop: threading.Event, tool: str) -> bool:
    """Wait until --wait-receivers receivers have joined `source` (behind a router: its proxy
    receiver), or `stop`; False, with a message, if --wait-timeout passed first. A multicast source
    cannot count its receivers: it waits until a receiver has asked for the topic, then for the
    time that receiver takes to join (JOIN_SETTLE_LIMIT and a little more)."""
    from router.um.source_cache import JOIN_SETTLE_LIMIT
    deadline = time.monotonic() + args.wait_timeout
    if source.receiver_count is None:
        if args.wait_receivers <= 0:
            return True
        while source.interest_heard is None and not stop.is_set():
            if time.monotonic() > deadline:
                print(f"{tool}: no receiver asked for the topic within {args.wait_timeout} s", file=sys.stderr)
                return False
            stop.wait(0.01)
        stop.wait(JOIN_SETTLE_LIMIT + _JOIN_MARGIN)
        return True
    while source.receiver_count < args.wait_receivers and not stop.is_set():
        if time.monotonic() > deadline:
            print(f"{tool}: no receiver joined within {args.wait_timeout} s", file=sys.stderr)
            return False
        stop.wait(0.01)
    return True


def open_context(args: argparse.Namespace) -> Context:
    """A context from the -c files (later files override earlier ones); exits 2 on a config error."""
    from router.gc_tuning import tune_for_message_rates
    from router.um.config import ConfigError, UMConfig, load_file
    from router.um.context import Context
    config = UMConfig()
    try:
        for path in args.config:
            config = load_file(path, into=config)
        context = Context(config=config)
        tune_for_message_rates()        # the example applications run at message rates
        return context
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except OSError as err:
        print(f"error: cannot open the context: {err}", file=sys.stderr)
        raise SystemExit(1) from None


def stop_event_on_signals() -> threading.Event:
    """An event set by SIGINT or SIGTERM: the tools finish their summary instead of dying."""
    stop = threading.Event()

    def handler(signum, frame) -> None:
        stop.set()
    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return stop


def print_json(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()
