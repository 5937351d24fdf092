"""umreq / umresp as real processes in one loopback domain: every request answered, with data
messages around them; no responder means unanswered requests and exit status 1."""
import json

import pytest

pytestmark = pytest.mark.integration


def umreq(tools, *args):
    return tools.start("router.cli.umreq", *args)


def umresp(tools, *args):
    return tools.start("router.cli.umresp", *args)


def test_every_request_is_answered(tools, domain):
    responder = umresp(tools, "-c", domain.config_path, "--json", "-C", 25, "--timeout", 60, "svc.tools")
    requester = umreq(tools, "-c", domain.config_path, "--json", "-R", 25, "-l", 200, "--wait-timeout", 30,
                      "svc.tools")
    asked = requester.result(90)
    answered = responder.result(60)
    assert (asked["topic"], asked["requests"], asked["answered"], asked["unanswered"], asked["responses"]) == \
        ("svc.tools", 25, 25, 0, 25), asked
    assert 0 < asked["rtt_us"]["p50"] <= asked["rtt_us"]["p99"] <= asked["rtt_us"]["max"]
    assert answered == {"topic": "svc.tools", "requests": 25, "responded": 25, "messages": 0}


def test_plain_messages_are_counted_not_answered(tools, domain):
    responder = umresp(tools, "-c", domain.config_path, "--json", "-C", 3, "--timeout", 60, "svc.mixed")
    source = tools.umsrc("-c", domain.config_path, "--json", "-M", 40, "-L", 0, "svc.mixed")
    assert source.result(60)["sent"] == 40
    requester = umreq(tools, "-c", domain.config_path, "--json", "-R", 3, "--wait-timeout", 30, "svc.mixed")
    assert requester.result(60)["answered"] == 3
    assert responder.result(60) == {"topic": "svc.mixed", "requests": 3, "responded": 3, "messages": 40}


def test_no_responder_leaves_every_request_unanswered_and_exits_1(tools, domain):
    requester = umreq(tools, "-c", domain.config_path, "--json", "-R", 3, "--wait-receivers", 0,
                      "--response-timeout", 0.3, "svc.nobody")
    assert requester.proc.wait(60) == 1
    for reader in requester._readers:
        reader.join(5)
    summary = json.loads([line for line in requester.stdout_lines if line.startswith("{")][-1])
    assert (summary["requests"], summary["answered"], summary["unanswered"], summary["responses"]) == (3, 0, 3, 0)
    assert summary["rtt_us"] == {"p50": None, "p99": None, "max": None}


def test_a_unicast_request_too_long_to_send_is_a_clear_error_not_a_traceback(tools, domain):
    """Unicast immediate messages carry at most 64 MB: umreq says so and exits 1."""
    requester = umreq(tools, "-c", domain.config_path, "--json", "-R", 1, "-l", 64 * 1024 * 1024 + 1,
                      "--unicast", f"TCP:127.0.0.1:{domain.request_low}", "svc.huge")
    assert requester.proc.wait(60) == 1
    for reader in requester._readers:
        reader.join(5)
    assert "Traceback" not in requester.stderr, requester.stderr
    assert "umreq: unicast immediate message of 67108865 bytes: at most 67108864" in requester.stderr
    summary = json.loads([line for line in requester.stdout_lines if line.startswith("{")][-1])
    assert (summary["requests"], summary["answered"]) == (0, 0)
