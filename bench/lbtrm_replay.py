"""Replay captured LBT-RM datagrams into one receiving group socket and session, in this process,
and print the CPU the receive path spent per datagram (JSON). Run by bench.lbtrm_receive with
PYTHONPATH set to the tree being measured: it imports nothing but that tree's `router.um`.

    python bench/lbtrm_replay.py CAPTURE READ GROUP PORT

CAPTURE: datagrams as written by bench.lbtrm_receive (4-byte big-endian length, then the
datagram). READ: how many are sent to the socket before each read of it. The session's frames go
to a raw subscription (a router's proxy receiver) that only counts them, so what is timed is the
socket read, the session's order and repair, and the frames' batching and parse; sending them
from this process is not timed.
"""
import json
import socket
import sys
import time

from router.um.lbtrm_receiver import LbtrmGroup, LbtrmSessionClient
from router.um.loop import EventLoop
from router.um.wire.lbtrm import DATA_HEADER, LbtrmData, decode_lbtrm


class CountingProxyReceiver:
    raw = True

    def __init__(self):
        self.frames = 0

    def on_frames(self, frames, count, longest):
        self.frames += count

    on_request_frames = on_frames

    def on_sequence_info(self, sqn):
        pass

    def on_gap(self, first, count):
        pass

    def on_eos(self):
        pass


def read_capture(path: str) -> list[bytes]:
    data, datagrams, offset = open(path, "rb").read(), [], 0
    while offset < len(data):
        size = int.from_bytes(data[offset:offset + 4], "big")
        datagrams.append(data[offset + 4:offset + 4 + size])
        offset += 4 + size
    return [d for d in datagrams if isinstance(decode_lbtrm(d), LbtrmData)]


def frames_in(datagram: bytes) -> int:
    """The LBMC frames after a DATA datagram's header, walked by their lengths."""
    count, offset = 0, DATA_HEADER.size
    while offset + 4 <= len(datagram):
        length = int.from_bytes(datagram[offset + 2:offset + 4], "big")
        if length < 4:
            break
        count, offset = count + 1, offset + length
    return count


def main() -> None:
    path, read, group, port = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    datagrams = read_capture(path)
    loop = EventLoop("replay")
    sessions = LbtrmGroup(loop, "127.0.0.1", group, port, 4 << 20, lambda _: None)
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender.bind(("127.0.0.1", 0))
    sender.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
    session_id = decode_lbtrm(datagrams[0]).session_id
    client = LbtrmSessionClient(loop, sessions, "127.0.0.1", sender.getsockname()[1], session_id, lambda _: None)
    receiver = CountingProxyReceiver()
    start = DATA_HEADER.size + 4                  # the first frame's topic index (LBMC message header)
    for tidx in {int.from_bytes(d[start:start + 4], "big") for d in datagrams[:64]}:
        client.subscribe(tidx, receiver)
    cpu = 0.0
    for start in range(0, len(datagrams), read):
        for datagram in datagrams[start:start + read]:
            sender.sendto(datagram, (group, port))
        began = time.process_time()
        sessions._readable()
        cpu += time.process_time() - began
    print(json.dumps({"datagrams": len(datagrams), "read": sessions.counters["datagrams"],
                      "frames_sent": sum(map(frames_in, datagrams)), "frames": receiver.frames,
                      "cpu_us_per_datagram": cpu / len(datagrams) * 1e6}))


if __name__ == "__main__":
    main()
