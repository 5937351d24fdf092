"""umsrc: publish numbered, timestamped messages on a topic (after UM's lbmsrc sample).

With --immediate it sends them as multicast immediate messages to the topic instead, without a
source (UM's lbmimsg); with --topicless, as topicless immediate messages; with --unicast TARGET, as
unicast immediate messages to one context (lbmimsg -T), in this domain or, through the routers,
another (TCP:domain:ip:port)."""
from __future__ import annotations

import argparse
import os
import select
import sys
import time

from router.cli import payload
from router.um.unicast_immediate import NoRouteToDomain, parse_target
from router.cli.common import (add_context_arguments, add_wait_arguments, at_least, open_context, print_json,
                               setup_logging, stop_event_on_signals, wait_for_receivers, wait_for_route)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="umsrc", description=__doc__)
    add_context_arguments(parser)
    parser.add_argument("-M", "--messages", type=at_least(0), default=10_000, metavar="COUNT", help="messages to send")
    parser.add_argument("-l", "--length", type=at_least(payload.MINIMUM_LENGTH), default=64, metavar="LEN", help="message length in bytes")
    parser.add_argument("-P", "--rate", type=at_least(0.0, float), default=0, metavar="MSGS_PER_SEC",
                        help="pace sending at this many messages per second (0: as fast as possible)")
    parser.add_argument("-T", "--transport", choices=("tcp", "lbtrm", "lbtru", "lbtipc"), default=None)
    add_wait_arguments(parser)
    parser.add_argument("--start-on-stdin", action="store_true",
                        help="after receivers joined, wait for a line on standard input before sending "
                             "(scripts use it to start when a receiver behind a router reports BOS)")
    parser.add_argument("-L", "--linger", type=at_least(0.0, float), default=0.5, metavar="S",
                        help="seconds to keep the source open after the last message")
    parser.add_argument("-F", "--flush", action="store_true", help="flush every message (lowest latency)")
    parser.add_argument("-i", "--source-id", type=lambda s: int(s, 0), default=None,
                        help="source id carried in each payload (default: random)")
    parser.add_argument("--immediate", action="store_true",
                        help="send multicast immediate messages to the topic (no source, no topic resolution)")
    parser.add_argument("--topicless", action="store_true",
                        help="send topicless multicast immediate messages (implies --immediate; no topic)")
    parser.add_argument("-U", "--unicast", metavar="TARGET",
                        help="send unicast immediate messages to the context at TARGET, TCP:ip:port or, in "
                             "another domain through the routers, TCP:domain:ip:port (implies --immediate)")
    parser.add_argument("--hf", action="store_true",
                        help="a hot failover source: message i is sent with sequence number (and payload "
                             "number) --hf-start + i, so that two umsrc --hf send the same numbers")
    parser.add_argument("--hf-start", type=at_least(0, at_most=0xFFFFFFFF), default=0, metavar="N",
                        help="the first hot failover sequence number (with --hf)")
    parser.add_argument("--hf-skip", type=_numbers, default=frozenset(), metavar="N,M,...",
                        help="hot failover sequence numbers not to send (with --hf; as if lost at this source)")
    parser.add_argument("--json", action="store_true", help="print a JSON summary at exit")
    parser.add_argument("topic", nargs="?")
    args = parser.parse_args(argv)
    if args.topicless or args.unicast:
        args.immediate = True
    if args.hf and args.immediate:
        parser.error("--hf sends from a source: not with immediate messages")
    if args.unicast:
        try:
            parse_target(args.unicast)
        except ValueError as err:
            parser.error(str(err))
    if not args.topicless and args.topic is None:
        parser.error("a topic is needed (or --topicless)")
    return args


def _numbers(text: str) -> frozenset[int]:
    try:
        return frozenset(int(part, 0) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from None


def main(argv=None) -> int:
    args = parse_args(argv)
    setup_logging(args.verbose)
    try:
        buffer = payload.make_buffer(args.length)
    except ValueError as err:
        print(f"umsrc: {err}", file=sys.stderr)
        return 2
    stop = stop_event_on_signals()
    context = open_context(args)
    source_id = args.source_id if args.source_id is not None else \
        HF_SOURCE_ID if args.hf else int.from_bytes(os.urandom(4), "big")
    try:
        if args.immediate:
            source = ImmediateSender(context, None if args.topicless else args.topic, args.unicast)
        elif args.hf:
            source = context.hf_source(args.topic, transport=args.transport)
        else:
            source = context.source(args.topic, transport=args.transport)
        if not args.immediate and not wait_for_receivers(source, args, stop, "umsrc"):
            return 1
        if args.unicast and not wait_for_route(context, parse_target(args.unicast), args, stop, "umsrc"):
            return 1
        if args.start_on_stdin:
            print("umsrc: waiting for a line on standard input", file=sys.stderr, flush=True)
            _wait_for_line(stop)
        started = time.monotonic()
        try:
            # Stopped while waiting: the run is given up before its first message.
            send = _send_hf if args.hf else _send
            sent = 0 if stop.is_set() else send(source, buffer, source_id, args, stop)
        except NoRouteToDomain as err:            # the route went away while sending
            print(f"umsrc: {err}", file=sys.stderr)
            return 1
        source.flush()
        elapsed = time.monotonic() - started
        stop.wait(args.linger)
        receivers = source.receiver_count         # joined at the end (a router's proxy receiver counts)
        source.close()
    finally:
        context.close()
    if args.json:
        print_json({"sent": sent, "bytes": sent * args.length, "elapsed_s": round(elapsed, 6),
                    "rate_msgs_per_s": round(sent / elapsed, 1) if elapsed > 0 else 0.0,
                    "source_id": f"{source_id:08x}", "receivers": receivers})
    return 0


# Two umsrc --hf send the same payloads (but for the send time): one source id, so a receiver's
# statistics see one stream of numbers.
HF_SOURCE_ID = 0x48460000


class ImmediateSender:
    """The parts of a source umsrc uses, for immediate messages (each one is sent at once)."""

    receiver_count = None           # immediate messages do not know who receives them

    def __init__(self, context, topic: str | None, target: str | None = None):
        self.context, self.topic, self.target = context, topic, target

    def send(self, data, flush: bool = False) -> None:
        if self.target is None:
            self.context.send_immediate(self.topic, data)
        else:
            self.context.send_unicast_immediate(self.target, self.topic, data)

    def send_many(self, messages) -> None:
        for data in messages:
            self.send(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def _wait_for_line(stop) -> None:
    """A line on standard input, or a stop: SIGINT and SIGTERM only set `stop` (so that umsrc
    prints its summary), and a plain readline would go on blocking through them."""
    while not stop.is_set():
        readable, _, _ = select.select([sys.stdin], [], [], 0.1)
        if readable:
            sys.stdin.readline()
            return


def _send(source, buffer: bytearray, source_id: int, args, stop) -> int:
    pack_into, send, time_ns = payload.pack_into, source.send, time.time_ns
    flush = args.flush
    if args.rate <= 0 and not flush:
        # send_many frames the messages in runs and takes the session's lock once a batch, not
        # once a message: 515 -> 365 ns a 64-byte message in this loop, 1.33M -> 1.85M msgs/s
        # umsrc -> umrcv over LBT-TCP. A stop is looked for between chunks.
        for start in range(0, args.messages, _CHUNK):
            end = min(start + _CHUNK, args.messages)
            source.send_many(_stamped(buffer, source_id, range(start, end)))
            if stop.is_set():
                return end
        return args.messages
    if args.rate <= 0:
        for seq in range(args.messages):
            pack_into(buffer, 0, source_id, seq, time_ns())
            send(buffer, flush)
            if not seq & 0x3FFF and stop.is_set():
                return seq + 1
        return args.messages
    interval = 1.0 / args.rate
    next_send = time.perf_counter()
    for seq in range(args.messages):
        now = time.perf_counter()
        if next_send > now:
            time.sleep(next_send - now)
        next_send += interval
        pack_into(buffer, 0, source_id, seq, time_ns())
        send(buffer, flush)
        if stop.is_set():
            return seq + 1
    return args.messages


_CHUNK = 0x4000                # messages sent between looks at `stop`, unpaced


def _stamped(buffer: bytearray, source_id: int, numbers: range):
    """`buffer` as each numbered message in turn, stamped as it is taken (the source copies it
    into its batch before asking for the next)."""
    pack_into, time_ns = payload.pack_into, time.time_ns
    for seq in numbers:
        pack_into(buffer, 0, source_id, seq, time_ns())
        yield buffer


def _send_hf(source, buffer: bytearray, source_id: int, args, stop) -> int:
    """Message i as hot failover sequence number --hf-start + i (at --rate if set); the numbers
    in --hf-skip are not sent. Returns how many were sent."""
    pack_into, send, time_ns = payload.pack_into, source.send, time.time_ns
    interval = 1.0 / args.rate if args.rate > 0 else 0.0
    next_send = time.perf_counter()
    sent = 0
    for seq in range(args.messages):
        number = (args.hf_start + seq) & 0xFFFFFFFF
        if number in args.hf_skip:
            continue
        if interval:
            now = time.perf_counter()
            if next_send > now:
                time.sleep(next_send - now)
            next_send += interval
        pack_into(buffer, 0, source_id, number, time_ns())
        send(buffer, number, args.flush)
        sent += 1
        if stop.is_set():
            break
    return sent


if __name__ == "__main__":
    sys.exit(main())
