"""ummon: receive the statistics contexts and routers publish, and print them (after UM's lbmmon).

Contexts publish with monitor_interval (router.um.monitoring); a router's portals with
<monitor interval="N"><transport-module module="lbm" options="config=FILE"/></monitor>."""
from __future__ import annotations

import argparse
import json
import sys
import threading

from router.cli.common import add_context_arguments, at_least, open_context, setup_logging, stop_event_on_signals
from router.um import monitoring


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="ummon", description=__doc__)
    add_context_arguments(parser)
    parser.add_argument("--topic", default=monitoring.DEFAULT_TOPIC, help="the statistics topic")
    parser.add_argument("--separator", default=",", help="the csv format's separator")
    parser.add_argument("-a", "--application-id", default=None, metavar="ID", help="only records of this application")
    parser.add_argument("-C", "--count", type=at_least(0), default=0, metavar="COUNT",
                        help="exit after this many records (0: run until stopped)")
    parser.add_argument("--timeout", type=at_least(0.0, float), default=0, metavar="S", help="exit after S seconds (0: no limit)")
    parser.add_argument("--json", action="store_true", help="one JSON object per record")
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    stop = stop_event_on_signals()
    lock = threading.Lock()
    shown = {"records": 0, "malformed": 0}

    def on_message(message) -> None:
        try:
            record = monitoring.decode(message.data, args.separator)
        except monitoring.MonitoringError as err:
            shown["malformed"] += 1
            print(f"ummon: {err}", file=sys.stderr, flush=True)
            return
        if args.application_id is not None and record["application_id"] != args.application_id:
            return
        with lock:
            if args.count and shown["records"] >= args.count:
                return
            shown["records"] += 1
            if args.json:
                print(json.dumps(record), flush=True)
            else:
                values = " ".join(f"{k}={v}" for k, v in record.items()
                                  if k not in ("type", "application_id", "time_ms", "object"))
                print(f"[{record['application_id']}] {record['type']} {record['object']}: {values}", flush=True)
            if args.count and shown["records"] >= args.count:
                stop.set()

    context = open_context(args)
    try:
        context.receiver(args.topic, on_message)
        print("ummon: subscribed", file=sys.stderr, flush=True)
        stop.wait(args.timeout or None)
    finally:
        context.close()
    return 0 if shown["malformed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
