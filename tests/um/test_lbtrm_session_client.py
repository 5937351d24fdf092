"""One joined LBT-RM session on real sockets: the receiving side (LbtrmGroup, LbtrmSessionClient)
on its own event loop, and a plain UDP socket playing the source, so a test says exactly which
datagrams arrive, in which order, and sees every NAK the receiver sends."""
from __future__ import annotations

import socket
import threading

import pytest

from router.um.lbtrm_receive_window import ReceiveWindow
from router.um.lbtrm_receiver import LbtrmGroup, LbtrmSessionClient
from router.um.wire.lbmc import LBMC_TYPE_MESSAGE, MESSAGE_HEADER, NHDR_DATA, NHDR_FRAG
from router.um.wire.lbtrm import (FLAG_RETRANSMISSION, LbtrmData, LbtrmNak, decode_lbtrm, encode_lbtrm_data,
                                  encode_lbtrm_sm)
from tests.support.decoded_data import record_decoded_data
from tests.support.domains import new_domain
from tests.support.processes import wait_for

pytestmark = pytest.mark.integration

TOPIC_INDEX = 7
SESSION_ID = 0x5E55


class _Application:
    """What a receiver of the session's one topic is told."""

    raw = False

    def __init__(self):
        self.messages: list[tuple[int, bytes]] = []
        self.gaps: list[tuple[int, int]] = []
        self.ended = False
        self.deliveries = 0                 # calls that brought messages

    def on_batch(self, messages):
        self.deliveries += 1
        self.messages.extend((sqn, bytes(payload)) for sqn, payload in messages)

    def on_run(self, data, first, count, length):
        self.deliveries += 1
        size = length - MESSAGE_HEADER.size
        self.messages.extend((first + n, bytes(data[n * length + MESSAGE_HEADER.size:][:size])) for n in range(count))

    def on_gap(self, first, count):
        self.gaps.append((first, count))

    def on_eos(self):
        self.ended = True


def message(sqn: int, payload: bytes) -> bytes:
    return MESSAGE_HEADER.pack(LBMC_TYPE_MESSAGE, NHDR_DATA, MESSAGE_HEADER.size + len(payload), TOPIC_INDEX,
                               sqn) + payload


class _Session:
    """A plain UDP socket sending one LBT-RM session to the group, and the receiver joined on it."""

    def __init__(self, loop, group: str, port: int, window: ReceiveWindow, activity_timeout: float = 60.0,
                 beside: "_Session | None" = None):
        self.loop, self.group, self.port = loop, group, port
        self.source = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.source.bind(("127.0.0.1", 0))
        self.source.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
        self.source.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
        self.source.settimeout(0.05)
        self.naks: list[int] = []
        self.application = _Application()
        self.closed: list = []
        source_port = self.source.getsockname()[1]

        def join():
            # `beside`: a session on the same group socket as another one's.
            sockets = beside.client.socket if beside else LbtrmGroup(loop, "127.0.0.1", group, port, 1 << 20,
                                                                     lambda _: None)
            client = LbtrmSessionClient(loop, sockets, "127.0.0.1", source_port, SESSION_ID, self.closed.append,
                                        activity_timeout=activity_timeout, window=window)
            client.subscribe(TOPIC_INDEX, self.application)
            return client

        self.client = loop.call_and_wait(join)

    def send(self, sqn: int, payload: bytes, retransmission: bool = False) -> None:
        flags = FLAG_RETRANSMISSION if retransmission else 0
        self.source.sendto(encode_lbtrm_data(SESSION_ID, sqn, payload, trail_sqn=0, flags=flags),
                           (self.group, self.port))

    def send_sm(self, lead: int, trail: int) -> None:
        self.source.sendto(encode_lbtrm_sm(SESSION_ID, 0, 0, lead, trail), (self.group, self.port))

    def read_naks(self) -> list[int]:
        """The sequence numbers NAKed since the last call (what has reached the source by now)."""
        while True:
            try:
                datagram, _ = self.source.recvfrom(65536)
            except (socket.timeout, BlockingIOError):
                return self.naks
            packet = decode_lbtrm(datagram)
            if isinstance(packet, LbtrmNak):
                self.naks.extend(packet.sqns)

    def counters(self) -> dict:
        return self.loop.call_and_wait(lambda: dict(self.client.counters))

    def close(self) -> None:
        self.loop.call_and_wait(self.client.close)
        self.source.close()


@pytest.fixture
def session(loop, tmp_path):
    opened = []

    def open_session(beside: _Session | None = None, **options) -> _Session:
        if beside is None:
            domain = new_domain(tmp_path)
            group, port = domain.lbtrm_group, domain.port
        else:
            group, port = beside.group, beside.port
        opened.append(_Session(loop, group, port, beside=beside, **options))
        return opened[-1]

    yield open_session
    for each in reversed(opened):
        each.close()


# -- one read, one parse ------------------------------------------------------------------------
def test_the_datagrams_one_read_brings_reach_the_application_as_one_batch(session):
    """What waited in the socket (its reading paused, as flow control pauses it) is read at once
    and parsed at once: one delivery, every message in order."""
    joined = session(window=ReceiveWindow(nak_initial_backoff=0.0))
    joined.loop.call_and_wait(joined.client.pause)
    for sqn in range(20):
        joined.send(sqn, message(sqn, bytes([sqn]) * 3000))
    joined.loop.call_and_wait(joined.client.resume)
    app = joined.application
    wait_for(lambda: len(app.messages) == 20, 10, message="the 20 messages")
    assert app.messages == [(sqn, bytes([sqn]) * 3000) for sqn in range(20)]
    assert app.deliveries == 1
    assert joined.counters()["bytes"] == 20 * (MESSAGE_HEADER.size + 3000)


# -- the steady state's shortcut -----------------------------------------------------------------
def test_datagrams_in_order_skip_decoding_and_a_gap_sends_them_the_whole_way_until_repaired(session):
    """A busy session's datagrams, each the next one with nothing missing, are taken straight
    from their header (in_order_data), not decoded into packets; the one that finds a gap, and
    what comes until it is repaired, go the whole way (`packet`), where loss is handled. The
    application gets the same either way."""
    joined = session(window=ReceiveWindow(nak_initial_backoff=0.0))
    decoded = record_decoded_data(joined.loop, joined.client, LbtrmData)
    app = joined.application
    for sqn in range(10):
        joined.send(sqn, message(sqn, b"m%d" % sqn))
    wait_for(lambda: len(app.messages) == 10, 10, message="the first 10 messages")
    assert decoded == [0], "only the first datagram (where the window starts) needs decoding"
    joined.send(11, message(11, b"m11"))
    joined.send(12, message(12, b"m12"))
    wait_for(lambda: 10 in joined.read_naks(), 10, message="a NAK for 10")
    joined.send(10, message(10, b"m10"), retransmission=True)
    wait_for(lambda: len(app.messages) == 13, 10, message="the repair")
    for sqn in range(13, 16):
        joined.send(sqn, message(sqn, b"m%d" % sqn))
    wait_for(lambda: len(app.messages) == 16, 10, message="the messages after the repair")
    assert decoded == [0, 11, 12, 10], "after the repair the shortcut is taken again"
    assert app.messages == [(sqn, b"m%d" % sqn) for sqn in range(16)] and not app.gaps
    counters = joined.counters()
    assert counters["msgs_rcved"] == 16 and counters["retransmissions_rcved"] == 1 and counters["lost"] == 0
    assert counters["bytes_rcved"] == sum(len(message(sqn, b"m%d" % sqn)) for sqn in range(16))


def test_a_read_that_brings_little_says_so_to_the_loop_and_one_that_brings_much_does_not(session):
    """Read coalescing (router.um.loop): a batching router worker pauses before its next wait
    after a small read of a session's socket, as after one of a TCP connection, so each wake-up
    takes in more of a stream; a read that brought SMALL_READ or more has nothing to wait for."""
    joined = session(window=ReceiveWindow(nak_initial_backoff=0.0))
    small_reads: list[bool] = []
    joined.loop.read_was_small = lambda: small_reads.append(True)   # told before the read's frames go on
    app = joined.application
    joined.send(0, message(0, b"small"))
    wait_for(lambda: len(app.messages) == 1, 10, message="the small datagram")
    wait_for(lambda: small_reads, 10, message="the small read told")
    joined.loop.call_and_wait(joined.client.pause)
    for sqn in range(1, 6):
        joined.send(sqn, message(sqn, bytes(8000)))          # 40 KB waiting: one read takes it all
    joined.loop.call_and_wait(joined.client.resume)
    wait_for(lambda: len(app.messages) == 6, 10, message="the five large datagrams")
    assert len(small_reads) == 1, "the read of 40 KB was told as small"
    joined.send(6, message(6, b"small again"))
    wait_for(lambda: len(app.messages) == 7, 10, message="the last datagram")
    assert len(small_reads) == 2


# -- malformed datagrams -------------------------------------------------------------------------
@pytest.mark.parametrize("read_at_once", [False, True], ids=["as-they-come", "one-read"])
@pytest.mark.parametrize("broken, gaps", [
    # A frame of length 0: nothing after it can be framed; the message it hid is told lost.
    (b"\x02\x00\x00\x00" + b"\xff" * 20, [(2, 1)]),
    # A fragment too short for its FRAG header: its frame is read (sqn 2) and dropped as malformed.
    (MESSAGE_HEADER.pack(LBMC_TYPE_MESSAGE, NHDR_FRAG, 16, TOPIC_INDEX, 2) + b"\x00" * 4, []),
], ids=["frame-length-0", "fragment-too-short"])
def test_a_datagram_with_a_broken_frame_is_dropped_and_counted_and_the_session_goes_on(session, broken, gaps,
                                                                                         read_at_once):
    """Each datagram of a UDP session is framed on its own: one whose frames are broken (sent by a
    faulty or foreign sender) is counted and dropped; the session and its receivers go on, and
    the datagrams after it are delivered. Also when all three come in one read, parsed together."""
    joined = session(window=ReceiveWindow(nak_initial_backoff=0.0))
    if read_at_once:
        joined.loop.call_and_wait(joined.client.pause)
    joined.send(0, message(0, b"zero") + message(1, b"one"))
    joined.send(1, broken)
    joined.send(2, message(3, b"three"))
    if read_at_once:
        joined.loop.call_and_wait(joined.client.resume)
    app = joined.application
    wait_for(lambda: len(app.messages) == 3 or app.ended, 10, message="the messages after the broken datagram")
    counters = joined.counters()
    assert not app.ended and not joined.closed, "one broken datagram ended the whole session"
    assert app.messages == [(0, b"zero"), (1, b"one"), (3, b"three")]
    assert counters["malformed"] == 1, counters
    assert app.gaps == gaps


@pytest.mark.parametrize("claim", ["DATA", "SM"])
@pytest.mark.parametrize("lead", [(1 << 31) - 1, 1 << 29], ids=["2^31-1 ahead", "2^29 ahead"])
def test_a_lead_no_source_could_have_reached_is_dropped_as_malformed_and_the_session_goes_on(session, claim, lead):
    """A datagram of the session (a corrupt or forged one) claiming a sequence number far beyond
    what any source could have sent since the last one heard is not believed: it is counted as
    malformed, and declares nothing lost, sends no NAK and never makes the session's own data
    look old; what the source sends next is delivered."""
    joined = session(window=ReceiveWindow(nak_initial_backoff=0.0, nak_backoff=0.05))
    joined.send(0, message(0, b"zero"))
    joined.send(1, message(1, b"one"))
    app = joined.application
    wait_for(lambda: len(app.messages) == 2, 10, message="the first two messages")
    if claim == "DATA":
        joined.send(1 + lead, message(2, b"forged"))
    else:
        joined.send_sm(1 + lead, 0)
    joined.send(2, message(2, b"two"))
    joined.send(3, message(3, b"three"))
    wait_for(lambda: len(app.messages) == 4 or app.ended or joined.counters()["duplicate_data"], 10,
             message="the messages after the forged datagram")
    _loop_passes(joined.loop, 0.2)             # NAKs for the forged gap would be out by now
    counters = joined.counters()
    assert app.messages == [(0, b"zero"), (1, b"one"), (2, b"two"), (3, b"three")]
    assert not app.ended and not joined.closed and app.gaps == []
    assert counters["malformed"] == 1 and counters["lost"] == 0 and counters["unrecovered_txw"] == 0, counters
    assert joined.read_naks() == [] and counters["naks_sent"] == 0


# -- flow control --------------------------------------------------------------------------------
def _loop_passes(loop, seconds: float) -> None:
    """Wait until the receiving loop has run its timers due within `seconds` from now (the NAK and
    give-up timers among them)."""
    passed = threading.Event()
    loop.call_soon_threadsafe(loop.call_later, seconds, passed.set)
    assert passed.wait(seconds + 10), "the receiving loop stalled"


@pytest.mark.parametrize("held_by", ["its own consumer", "another session's consumer"])
def test_repair_waits_while_the_socket_is_not_read_and_the_repair_that_waited_is_delivered(session, loop, held_by):
    """Flow control (a router's rings full) stops reading the group socket: the retransmission
    that fills a gap waits in the kernel. Meanwhile no NAK goes (each would only queue another
    copy) and the gap is not given up (its repair is here, unread): once the socket is read
    again, everything is delivered in order and nothing is told lost."""
    generation = 0.3
    joined = session(window=ReceiveWindow(nak_initial_backoff=0.0, nak_backoff=0.05, nak_generation=generation))
    holder = joined if held_by == "its own consumer" else session(beside=joined, window=ReceiveWindow())
    joined.send(0, message(0, b"zero"))
    joined.send(2, message(2, b"two"))
    wait_for(lambda: 1 in joined.read_naks(), 10, message="the gap is NAKed")
    loop.call_and_wait(holder.client.pause)
    naked = len(joined.read_naks())

    joined.send(1, message(1, b"one"), retransmission=True)
    joined.send(3, message(3, b"three"))
    _loop_passes(loop, 3 * generation)
    naks_while_unread = joined.read_naks()[naked:]
    counters = joined.counters()
    loop.call_and_wait(holder.client.resume)

    app = joined.application
    wait_for(lambda: any(sqn == 3 for sqn, _ in app.messages), 10, message="the message sent while held back")
    after = joined.counters()
    assert counters["lost"] == 0 and counters["unrecovered_tmo"] == 0, counters
    assert naks_while_unread == [], "NAKed while the socket was not read"
    assert app.messages == [(0, b"zero"), (1, b"one"), (2, b"two"), (3, b"three")]
    assert app.gaps == [] and not app.ended
    assert after["lost"] == 0 and after["duplicate_data"] == 0, after
