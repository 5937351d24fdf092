"""umrcv: receive a topic and report delivery: loss, duplicates, order, rate, latency (after lbmrcv)."""
from __future__ import annotations

import argparse
import sys
import time

from router.cli.common import add_context_arguments, at_least, open_context, print_json, setup_logging, stop_event_on_signals
from router.cli.receive_stats import ReceiveStats
from router.um.hot_failover import HfReceiver, HfWildcardReceiver
from router.um.hotlinks import HotlinkReceiver
from router.um.messages import UNRECOVERABLE_LOSS
from router.um.source_cache import key_string


def add_receive_arguments(parser: argparse.ArgumentParser) -> None:
    add_context_arguments(parser)
    parser.add_argument("-C", "--count", type=at_least(0), default=0, metavar="COUNT",
                        help="exit after this many messages (0: run until stopped)")
    parser.add_argument("--timeout", type=at_least(0.0, float), default=0, metavar="S",
                        help="exit after S seconds whatever was received (0: no limit)")
    parser.add_argument("-E", "--exit-on-eos", action="store_true",
                        help="exit when a joined source ends")
    parser.add_argument("--idle-timeout", type=at_least(0.0, float), default=0, metavar="S",
                        help="exit when nothing has arrived for S seconds (after at least one message)")
    parser.add_argument("--json", action="store_true", help="print a JSON summary at exit")


def run_receiver(args, subscribe) -> int:
    """Open the context, subscribe with `subscribe(context, on_batch, on_event)`, wait, report."""
    setup_logging(args.verbose)
    stop = stop_event_on_signals()
    stats = ReceiveStats()
    context = open_context(args)
    done_count = args.count
    streams = {}                      # every transport stream joined, ended ones too: their counters

    def on_batch(messages) -> None:
        stats.on_batch(messages)
        if done_count and stats.received >= done_count:
            stop.set()

    def on_event(event) -> None:
        stats.on_event(event)
        if event.kind == UNRECOVERABLE_LOSS:
            if args.verbose:
                print(f"[{event.topic}][{event.source}], unrecoverable loss of {event.count} messages from "
                      f"sequence number {event.sequence_number}", file=sys.stderr, flush=True)
            return
        client = getattr(event.joined, "client", None)
        if client is not None:
            streams[client.key] = client
        # UM's sample receivers report each transport session's start and end like this.
        what = "Beginning of Transport Session" if event.kind == "BOS" else "End of Transport Session"
        print(f"[{event.topic}][{event.source}], {what}", file=sys.stderr, flush=True)
        if args.exit_on_eos and event.kind == "EOS":
            stop.set()

    try:
        subscription = subscribe(context, on_batch, on_event)
        # Immediate messages have no beginning of stream: scripts start their sender on this line.
        print("umrcv: subscribed", file=sys.stderr, flush=True)
        deadline = time.monotonic() + args.timeout if args.timeout else None
        while not stop.is_set():
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                break
            if args.idle_timeout and stats.last_time is not None \
                    and time.time_ns() - stats.last_time > args.idle_timeout * 1e9:
                break
            stop.wait(0.05 if args.idle_timeout else (deadline - now if deadline else None))
    finally:
        transports = _transport_counters(streams)
        context.close()
    summary = stats.summary()
    if isinstance(subscription, (HfReceiver, HfWildcardReceiver)):
        counters = subscription.counters
        summary["hf_duplicates_discarded"] = counters["duplicates_discarded"]
        summary["hf_duplicates_delivered"] = counters["duplicates_delivered"]
        summary["hf_hold_limit_releases"] = counters["hold_limit_releases"]
    if isinstance(subscription, HotlinkReceiver):
        counters = subscription.counters
        summary["hotlink_duplicates_discarded"] = counters["duplicates_discarded"]
    if transports:
        summary["transports"] = transports
    if args.json:
        print_json(summary)
    else:
        print(f"received {summary['received']} messages ({summary['unique']} unique, {summary['gaps']} missing, "
              f"{summary['duplicates']} duplicates) at {summary['rate_msgs_per_s']:.0f} msgs/s; "
              f"latency p50 {summary['latency_us']['p50']} us p99 {summary['latency_us']['p99']} us")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="umrcv", description=__doc__)
    add_receive_arguments(parser)
    parser.add_argument("--topicless", action="store_true",
                        help="receive topicless multicast immediate messages (no topic); immediate messages "
                             "to a topic reach its receiver without this")
    parser.add_argument("--unicast", action="store_true",
                        help="also take unicast immediate messages: open this context's request port and say "
                             "its address on standard error (umsrc --unicast sends to it)")
    parser.add_argument("--hf", action="store_true",
                        help="a hot failover receiver: each sequence number of the topic's sources once, in "
                             "order (--json adds its hf_* counts)")
    parser.add_argument("--hotlink", action="store_true",
                        help="DRO Hotlinks (receiver option use_hotlink 1): join every path redundant routers "
                             "forward a source by, deliver the first copy of each message (--json adds "
                             "hotlink_duplicates_discarded)")
    parser.add_argument("topic", nargs="?")
    args = parser.parse_args(argv)
    if args.topicless and (args.hf or args.hotlink):
        parser.error("--hf and --hotlink receive a topic's sources: not with --topicless")
    if args.hf and args.hotlink:
        parser.error("--hotlink merges the copies of each source: not with --hf (DRO Hotlinks exclude hot failover)")
    if args.topicless:
        return run_receiver(args, lambda ctx, on_batch, on_event: _receive(
            args, ctx, lambda: ctx.immediate_receiver(lambda m: on_batch((m,)))))
    if args.topic is None:
        parser.error("a topic is needed (or --topicless)")
    options = {"use_hotlink": True} if args.hotlink else {}
    receive = "hf_receiver" if args.hf else "receiver"
    return run_receiver(args, lambda ctx, on_batch, on_event: _receive(
        args, ctx, lambda: getattr(ctx, receive)(args.topic, on_event=on_event, on_batch=on_batch, **options)))


def _receive(args, context, start):
    found = start()
    if args.unicast:
        ip, port = context.request_address()
        print(f"umrcv: unicast immediate messages to TCP:{ip}:{port} (from another domain: "
              f"TCP:<this domain's id>:{ip}:{port})", file=sys.stderr, flush=True)
    return found


# What each kind of transport session's receiver counts that a user asks about (UM's lbmrcv -v
# prints its transport statistics): bytes for every stream, loss repair for LBT-RM.
_REPORTED = ("bytes", "frames", "malformed", "msgs_rcved", "naks_sent", "nak_pckts_sent", "ncfs_ignored",
             "ncfs_shed", "ncfs_rx_delay", "retransmissions_rcved", "duplicate_data", "lost", "unrecovered_txw",
             "unrecovered_tmo")


def _transport_counters(streams: dict) -> dict[str, dict[str, int]]:
    """The counters of the transport streams received from (by session string)."""
    return {key_string(key): {name: client.counters[name] for name in _REPORTED if name in client.counters}
            for key, client in list(streams.items())}


if __name__ == "__main__":
    sys.exit(main())

