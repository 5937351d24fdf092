"""umsrc / umrcv / umwrcv as real processes in loopback domains: delivery, loss, isolation."""
import signal

import pytest

from tests.support.processes import wait_for

pytestmark = pytest.mark.integration


def test_200k_small_messages_over_lbt_tcp(tools, domain):
    receiver = tools.umrcv("-c", domain.config_path, "--json", "-C", 200_000, "--timeout", 240, "T")
    source = tools.umsrc("-c", domain.config_path, "--json", "-M", 200_000, "-l", 64, "T")
    sent = source.result(timeout=240)
    got = receiver.result(timeout=240)
    assert sent["sent"] == 200_000
    assert got["received"] == 200_000
    assert got["unique"] == 200_000
    assert got["gaps"] == 0 and got["duplicates"] == 0 and got["out_of_order"] == 0
    assert got["latency_us"]["p50"] is not None


def test_fragmented_messages_are_reassembled(tools, domain):
    receiver = tools.umrcv("-c", domain.config_path, "--json", "-C", 2000, "--timeout", 240, "big")
    source = tools.umsrc("-c", domain.config_path, "--json", "-M", 2000, "-l", 100_000, "big")
    assert source.result(timeout=240)["sent"] == 2000
    got = receiver.result(timeout=240)
    assert (got["received"], got["gaps"], got["duplicates"]) == (2000, 0, 0)


def test_wildcard_receiver_gets_matching_topics_only(tools, domain):
    receiver = tools.umwrcv("-c", domain.config_path, "--json", "-C", 2000, "--timeout", 120, r"^md\.")
    a = tools.umsrc("-c", domain.config_path, "--json", "-M", 1000, "-i", "0xA", "md.a")
    b = tools.umsrc("-c", domain.config_path, "--json", "-M", 1000, "-i", "0xB", "md.b")
    other = tools.umsrc("-c", domain.config_path, "--json", "-M", 1000, "-i", "0xC", "-W", 0, "-L", 2, "other")
    for source in (a, b, other):
        source.result(timeout=120)
    got = receiver.result(timeout=120)
    assert got["received"] == 2000
    assert set(got["per_source"]) == {"0000000a", "0000000b"}
    assert got["per_source"]["0000000a"]["topics"] == ["md.a"]


def test_domains_do_not_see_each_other(tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    receiver = tools.umrcv("-c", lan2.config_path, "--json", "--timeout", 3, "shared.topic")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", 500, "-W", 0, "-L", 2.5, "shared.topic")
    source.result(timeout=60)
    assert receiver.result(timeout=60)["received"] == 0


def test_bad_config_names_file_and_line(tools, tmp_path):
    bad = tmp_path / "bad.cfg"
    bad.write_text("context resolver_multicast_port 13000\ncontext resolver_multicast_ttl lots\n")
    tool = tools.umrcv("-c", bad, "--json", "T")
    tool.proc.wait(30)
    assert tool.proc.returncode == 2
    wait_for(lambda: f"{bad}:2" in tool.stderr, 5, message="the error message")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_while_umsrc_waits_for_its_start_line_ends_it_without_sending(tools, domain, sig):
    """A script that gives up on a run (or Ctrl-C) while umsrc waits on standard input: umsrc
    stops at once with its summary, and sends nothing."""
    source = tools.umsrc("-c", domain.config_path, "--json", "-W", 0, "--start-on-stdin", "-M", 10, "never.started")
    source.wait_for_stderr("waiting for a line", 30)
    source.proc.send_signal(sig)
    assert source.result(timeout=30)["sent"] == 0
