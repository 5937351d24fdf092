"""umreq: send requests on a topic, one after another, and report which were answered and how fast
(after UM's lbmreq sample). With --unicast TARGET, unicast immediate requests to one context
(lbm_unicast_immediate_request; through the routers for TCP:domain:ip:port) instead.

Each request waits for its first response or --response-timeout. Requests stay open to the end,
so late responses, and responses from several responders, are all counted in "responses".
Exit status: 0 every request was answered; 1 some were not (or no receiver joined); 2 usage.
"""
from __future__ import annotations

import argparse
import sys
import threading
import time

import numpy as np

from router.cli.common import (add_context_arguments, add_wait_arguments, at_least, open_context, print_json,
                               setup_logging, stop_event_on_signals, wait_for_receivers, wait_for_route)
from router.um.unicast_immediate import parse_target


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="umreq", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_context_arguments(parser)
    parser.add_argument("-R", "--requests", type=at_least(0), default=10, metavar="COUNT", help="requests to send")
    parser.add_argument("-l", "--length", type=at_least(0), default=64, metavar="LEN", help="request length in bytes")
    parser.add_argument("-T", "--transport", choices=("tcp", "lbtipc"), default=None)
    add_wait_arguments(parser)
    parser.add_argument("--response-timeout", type=at_least(0.0, float), default=5.0, metavar="S",
                        help="seconds each request waits for its first response")
    parser.add_argument("-U", "--unicast", metavar="TARGET",
                        help="send unicast immediate requests to the context at TARGET (TCP:ip:port, or "
                             "TCP:domain:ip:port through the routers) instead of requests on a source")
    parser.add_argument("--json", action="store_true", help="print a JSON summary at exit")
    parser.add_argument("topic")
    args = parser.parse_args(argv)
    if args.unicast:
        try:
            parse_target(args.unicast)
        except ValueError as err:
            parser.error(str(err))
    return args


def request_payload(number: int, length: int) -> bytes:
    """The request's number, padded to `length` (so a response can be told apart by eye)."""
    return (b"%d:" % number).ljust(length, b".")[:length]


class _Tally:
    """Responses as they arrive (on the context's thread) and the round trip of each request."""

    def __init__(self):
        self.responses = 0
        self.rtt_us: list[float] = []
        self.lock = threading.Lock()

    def ask(self, source, number: int, length: int, timeout: float):
        first = threading.Event()
        sent_at = time.perf_counter()

        def on_response(response) -> None:
            with self.lock:
                self.responses += 1
                if not first.is_set():
                    self.rtt_us.append((time.perf_counter() - sent_at) * 1e6)
                    first.set()
        pending = source.send_request(request_payload(number, length), on_response)
        return pending, first.wait(timeout)


class UnicastRequests:
    """The parts of a source umreq uses, for unicast immediate requests to one context."""

    def __init__(self, context, target: str, topic: str):
        self.context, self.target, self.topic = context, target, topic

    def send_request(self, data, on_response):
        return self.context.send_unicast_immediate_request(self.target, self.topic, data, on_response)

    def close(self) -> None:
        pass


def _percentiles(values: list[float]) -> dict:
    if not values:
        return {"p50": None, "p99": None, "max": None}
    array = np.asarray(values)
    return {"p50": round(float(np.percentile(array, 50)), 1), "p99": round(float(np.percentile(array, 99)), 1),
            "max": round(float(array.max()), 1)}


def main(argv=None) -> int:
    args = parse_args(argv)
    setup_logging(args.verbose)
    stop = stop_event_on_signals()
    context = open_context(args)
    tally, pending, answered, joined = _Tally(), [], 0, False
    try:
        if args.unicast:
            source = UnicastRequests(context, args.unicast, args.topic)
            joined = wait_for_route(context, parse_target(args.unicast), args, stop, "umreq")
        else:
            source = context.source(args.topic, transport=args.transport)
            joined = wait_for_receivers(source, args, stop, "umreq")
        for number in range(args.requests if joined else 0):
            if stop.is_set():
                break
            try:
                request, was_answered = tally.ask(source, number, args.length, args.response_timeout)
            except (OSError, ValueError) as err:
                # No request port, no route any more, or a request that cannot be sent at all (a
                # unicast one above 64 MB): every further request would fail the same way.
                print(f"umreq: {err}", file=sys.stderr)
                break
            pending.append(request)
            answered += was_answered
        for request in pending:
            request.close()
        source.close()
    finally:
        context.close()
    with tally.lock:
        summary = {"topic": args.topic, "requests": len(pending), "answered": answered,
                   "unanswered": len(pending) - answered, "responses": tally.responses,
                   "rtt_us": _percentiles(tally.rtt_us)}
    if args.json:
        print_json(summary)
    else:
        print(f"{summary['requests']} requests, {answered} answered, {summary['unanswered']} unanswered, "
              f"{summary['responses']} responses; rtt p50 {summary['rtt_us']['p50']} us "
              f"p99 {summary['rtt_us']['p99']} us")
    complete = joined and len(pending) == args.requests
    return 0 if complete and summary["unanswered"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
