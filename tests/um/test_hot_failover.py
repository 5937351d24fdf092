"""Hot failover in one domain: HF sources on the wire, umsrc --hf / umrcv --hf as real processes."""
import signal
import subprocess
import threading

import pytest

from router.um.context import Context
from tests.support.domains import new_domain
from tests.support.processes import wait_for
from tests.support.tshark import LiveCapture, assert_no_expert_info, decode

pytestmark = pytest.mark.integration

COUNT = 4000
LENGTH = 500


def bytes_sent(tool) -> int:
    """What the process has sent on its TCP connections so far (its progress sending), as the
    kernel counts it (ss -tinp: each socket's line names its process, the next its counters)."""
    listing = subprocess.run(["ss", "-tinpH"], capture_output=True, text=True, check=True).stdout.splitlines()
    owner, total = f"pid={tool.proc.pid},", 0
    for line, info in zip(listing, listing[1:]):
        if owner in line:
            total += sum(int(item.split(":")[1]) for item in info.split() if item.startswith("bytes_sent:"))
    return total


def start_hf_pair(tools, config_path, topic, *extra_a, receiver_config=None, other=()):
    """An HF receiver (in `receiver_config`'s domain, else the sources') and two umsrc --hf
    sending the same numbers (the first with `extra_a`, the other with `other`), started once
    the receiver joined both."""
    receiver = tools.umrcv("-c", receiver_config or config_path, "--json", "--hf", "-C", COUNT,
                           "--timeout", 120, topic)
    sources = [tools.umsrc("-c", config_path, "--json", "--hf", "-M", COUNT, "-l", LENGTH, "-P", 1000,
                           "--start-on-stdin", "-L", 1, *extra, topic) for extra in (extra_a, other)]
    wait_for(lambda: receiver.stderr.count("Beginning of Transport Session") == 2, 30,
             message="the HF receiver joins both sources")
    for source in sources:
        source.send_line()
    return receiver, sources


def test_two_hf_sources_deliver_each_number_once(tools, domain):
    receiver, sources = start_hf_pair(tools, domain.config_path, "hf.both")
    for source in sources:
        assert source.result(120)["sent"] == COUNT
    got = receiver.result(120)
    assert (got["received"], got["unique"], got["gaps"], got["duplicates"]) == (COUNT, COUNT, 0, 0), got
    assert got["unrecoverable_loss"] == 0
    assert got["hf_duplicates_discarded"] > 0, "the second source's copies never reached the merge"
    assert got["per_source"]["48460000"]["first_seq"] == 0


def test_an_hf_source_killed_midway_loses_nothing(tools, domain):
    receiver, (doomed, survivor) = start_hf_pair(tools, domain.config_path, "hf.kill")
    wait_for(lambda: bytes_sent(doomed) > COUNT * LENGTH // 2, 60, message="the first source half way")
    doomed.proc.send_signal(signal.SIGKILL)
    assert survivor.result(120)["sent"] == COUNT
    got = receiver.result(120)
    assert (got["received"], got["unique"], got["gaps"], got["duplicates"]) == (COUNT, COUNT, 0, 0), got
    assert got["unrecoverable_loss"] == 0 and got["eos"] >= 1
    assert got["hf_duplicates_discarded"] > 0, "the killed source's copies never reached the merge"


def test_hf_numbers_are_the_lbmc_sequence_numbers_on_the_wire(domain, tmp_path):
    """What the application numbers is what tshark reads as each frame's topic sequence number,
    plain LBMC with no warning; a number that does not increase is refused."""
    numbers = [0xFFFFFFF0, 0xFFFFFFF1, 0xFFFFFFF5, 0xFFFFFFFF, 0, 1, 7]      # skips, and the wrap
    pcap = tmp_path / "hf.pcapng"
    capture_filter = f"udp port {domain.port} or tcp portrange {domain.tcp_low}-{domain.tcp_high}"
    received = []
    done = threading.Event()
    with LiveCapture(capture_filter=capture_filter, path=pcap):
        publisher, subscriber = Context(**domain.overrides()), Context(**domain.overrides())
        try:
            def on_message(message):
                received.append(message.sequence_number)
                if len(received) == len(numbers):
                    done.set()
            subscriber.hf_receiver("hf.wire", on_message)
            source = publisher.hf_source("hf.wire")
            wait_for(lambda: source.receiver_count >= 1, 10, message="receiver joins")
            for number in numbers:
                source.send(b"hf %d" % number, number, flush=True)
            with pytest.raises(ValueError, match="does not increase"):
                source.send(b"again", numbers[-1])
            with pytest.raises(ValueError, match="does not increase"):
                source.send(b"behind", 0xFFFFFFF9)
            assert done.wait(10)
            port = source.transport_info.port
        finally:
            subscriber.close()
            publisher.close()
    assert received == numbers
    decode_as = [f"udp.port=={domain.port},lbmr", f"tcp.port=={port},lbttcp"]
    prefs = [f"lbttcp.source_port_low:{port}", f"lbttcp.source_port_high:{port}"]
    assert_no_expert_info(pcap, decode_as, prefs, min_severity="warn")
    frames = decode(pcap, decode_as, prefs, fields=["lbmc.sqn", "data.data"])
    on_wire = [int(sqn) for f in frames for sqn in f.get("lbmc.sqn", [])]
    assert on_wire == numbers


def test_a_gap_a_stopped_source_holds_is_given_up_at_the_loss_check(tools, domain, tmp_path):
    """One source is stopped (SIGSTOP: its connection stays open, so it never ends) before its
    first message; the other leaves out number 10. Without delivery_control_loss_check_interval the
    receiver would hold everything after 9 waiting for the stopped source's copy."""
    checked = tmp_path / "loss-check.cfg"
    checked.write_text("receiver delivery_control_loss_check_interval 200\n")
    receiver = tools.umrcv("-c", domain.config_path, "-c", checked, "--json", "--hf", "-C", COUNT - 1,
                           "--timeout", 120, "hf.stopped")
    stopped, running = [tools.umsrc("-c", domain.config_path, "--json", "--hf", "-M", COUNT, "-l", LENGTH,
                                    "-P", 1000, "--start-on-stdin", *extra, "hf.stopped")
                        for extra in ((), ("--hf-skip", "10"))]
    wait_for(lambda: receiver.stderr.count("Beginning of Transport Session") == 2, 30,
             message="the HF receiver joins both sources")
    stopped.proc.send_signal(signal.SIGSTOP)
    running.send_line()
    got = receiver.result(120)
    assert (got["unique"], got["gaps"], got["duplicates"]) == (COUNT - 1, 1, 0), got
    assert got["unrecoverable_loss"] == 1
    stopped.proc.send_signal(signal.SIGCONT)


def test_hf_sources_on_lbt_rm_through_loss_deliver_each_number_once(tmp_path, monkeypatch):
    """HF's usual ground: two multicast publishers. The receiver drops 5% of each session's
    datagrams (different ones); the merge takes whichever copy comes first, every number once."""
    monkeypatch.setenv("LBTRM_LOSS_RATE", "5")
    options = new_domain(tmp_path).overrides()
    numbers = range(3000)
    got = []
    with Context(**options) as receiving, Context(transport="lbtrm", **options) as first, \
            Context(transport="lbtrm", **options) as second:
        receiver = receiving.hf_receiver("hf.rm", on_batch=lambda ms: got.extend(m.sequence_number for m in ms))
        sources = [first.hf_source("hf.rm"), second.hf_source("hf.rm")]
        wait_for(lambda: len(receiving.clients) == 2, 10, message="the receiver joins both LBT-RM sessions")
        for number in numbers:
            for source in sources:
                source.send(b"hf %d" % number, number, flush=True)     # a datagram each
        wait_for(lambda: len(got) == len(numbers), 60, message="every number, once")
        streams = [stream.counters for stream in receiving.clients.values()]
        counters = receiver.counters
    assert got == list(numbers)
    assert all(stream["naks_sent"] > 0 for stream in streams), "each session lost datagrams"
    assert counters["duplicates_discarded"] > 0 and counters["loss_events"] == 0


def test_an_hf_wildcard_receiver_merges_each_matching_topic(tools, domain):
    """Two topics, two HF publishers each (one of the first topic's SIGKILLed midway): every
    number of each topic once, in order (umwrcv --hf, UM's lbm_hf_wildcard_rcv_create)."""
    receiver = tools.umwrcv("-c", domain.config_path, "--json", "--hf", "-C", 2 * COUNT, "--timeout", 120,
                            r"^hf\.wild\.")
    sources = {topic: [tools.umsrc("-c", domain.config_path, "--json", "--hf", "-M", COUNT, "-l", LENGTH,
                                   "-P", 1000, "--start-on-stdin", "-L", 1, "--source-id", source_id, topic)
                       for _ in range(2)]
               for topic, source_id in (("hf.wild.one", 1), ("hf.wild.two", 2))}
    wait_for(lambda: receiver.stderr.count("Beginning of Transport Session") == 4, 30,
             message="the HF wildcard receiver joins all four sources")
    for pair in sources.values():
        for source in pair:
            source.send_line()
    doomed, survivor = sources["hf.wild.one"]
    wait_for(lambda: bytes_sent(doomed) > COUNT * LENGTH // 2, 60, message="the first source half way")
    doomed.proc.send_signal(signal.SIGKILL)
    got = receiver.result(120)
    assert (got["received"], got["unique"], got["gaps"], got["duplicates"]) == (2 * COUNT, 2 * COUNT, 0, 0), got
    assert got["unrecoverable_loss"] == 0 and got["out_of_order"] == 0
    assert got["hf_duplicates_discarded"] > 0
