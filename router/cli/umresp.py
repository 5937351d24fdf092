"""umresp: receive a topic and answer each request on it with b"re:" + the request's data (after
UM's lbmresp sample). Plain messages on the topic are counted, not answered.

Exit status: 0 (also when --timeout ends it before COUNT requests); 2 usage or configuration.
"""
from __future__ import annotations

import argparse
import sys
import threading
import time

from router.cli.common import add_context_arguments, at_least, open_context, print_json, setup_logging, stop_event_on_signals
from router.um.messages import BOS, EOS, RequestMessage

RESPONSE_PREFIX = b"re:"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="umresp", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_context_arguments(parser)
    parser.add_argument("-C", "--count", type=at_least(0), default=0, metavar="COUNT",
                        help="exit after answering this many requests (0: run until stopped)")
    parser.add_argument("--timeout", type=at_least(0.0, float), default=0, metavar="S",
                        help="exit after S seconds whatever was received (0: no limit)")
    parser.add_argument("--unicast", action="store_true",
                        help="also answer unicast immediate requests to the topic: open this context's request "
                             "port and say its address on standard error (umreq --unicast sends to it)")
    parser.add_argument("--json", action="store_true", help="print a JSON summary at exit")
    parser.add_argument("topic")
    return parser.parse_args(argv)


class Responder:
    """Answers requests as they arrive (on the context's thread); counts what it saw."""

    def __init__(self, count: int, done: threading.Event):
        self.count, self.done = count, done
        self.requests = self.responded = self.messages = 0

    def on_batch(self, messages) -> None:
        for message in messages:
            if not isinstance(message, RequestMessage):
                self.messages += 1
                continue
            self.requests += 1
            message.respond(RESPONSE_PREFIX + message.data)
            self.responded += 1
            if self.count and self.responded >= self.count:
                self.done.set()

    @staticmethod
    def on_event(event) -> None:
        if event.kind not in (BOS, EOS):
            return                  # a loss: umresp answers what it gets
        what = "Beginning of Transport Session" if event.kind == BOS else "End of Transport Session"
        print(f"[{event.topic}][{event.source}], {what}", file=sys.stderr, flush=True)


def main(argv=None) -> int:
    args = parse_args(argv)
    setup_logging(args.verbose)
    stop = stop_event_on_signals()
    responder = Responder(args.count, stop)
    context = open_context(args)
    try:
        context.receiver(args.topic, on_event=responder.on_event, on_batch=responder.on_batch)
        if args.unicast:
            ip, port = context.request_address()
            print(f"umresp: unicast immediate requests to TCP:{ip}:{port} (from another domain: "
                  f"TCP:<this domain's id>:{ip}:{port})", file=sys.stderr, flush=True)
        deadline = time.monotonic() + args.timeout if args.timeout else None
        while not stop.is_set():
            remaining = deadline - time.monotonic() if deadline is not None else None
            if remaining is not None and remaining <= 0:
                break
            stop.wait(remaining)
    finally:
        context.close()         # waits until the last responses have been handed to TCP
    summary = {"topic": args.topic, "requests": responder.requests, "responded": responder.responded,
               "messages": responder.messages}
    if args.json:
        print_json(summary)
    else:
        print(f"{summary['requests']} requests, {summary['responded']} answered, {summary['messages']} messages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
