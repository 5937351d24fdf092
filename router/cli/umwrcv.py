"""umwrcv: receive every topic matching a pattern and report delivery (after lbmwrcv)."""
from __future__ import annotations

import argparse
import sys

from router.cli.umrcv import add_receive_arguments, run_receiver


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="umwrcv", description=__doc__)
    add_receive_arguments(parser)
    parser.add_argument("--kind", choices=("pcre", "regex"), default="pcre", help="pattern syntax")
    parser.add_argument("--hf", action="store_true",
                        help="a hot failover wildcard receiver: each matching topic's sequence numbers once, "
                             "in order (--json adds its hf_* counts)")
    parser.add_argument("pattern")
    args = parser.parse_args(argv)
    receive = "hf_wildcard_receiver" if args.hf else "wildcard_receiver"
    return run_receiver(args, lambda ctx, on_batch, on_event: getattr(ctx, receive)(
        args.pattern, on_event=on_event, kind=args.kind, on_batch=on_batch))


if __name__ == "__main__":
    sys.exit(main())
