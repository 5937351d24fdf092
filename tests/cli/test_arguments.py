"""The example tools refuse negative counts, rates and times (and umsrc a message shorter than its
payload header) as usage errors, exit status 2 with the bound named, instead of running with them:
a negative message count sent nothing and reported success, a negative rate sent unpaced."""
import subprocess
import sys

import pytest

from router.cli import payload, umreq, umresp, umsrc

BAD = [
    (umsrc.parse_args, ["-M", "-5", "t"], "-M/--messages: must be at least 0"),
    (umsrc.parse_args, ["-l", "3", "t"], f"-l/--length: must be at least {payload.MINIMUM_LENGTH}"),
    (umsrc.parse_args, ["-P", "-1", "t"], "-P/--rate: must be at least 0.0"),
    (umsrc.parse_args, ["-L", "-0.5", "t"], "-L/--linger: must be at least 0.0"),
    (umsrc.parse_args, ["-W", "-1", "t"], "-W/--wait-receivers: must be at least 0"),
    (umsrc.parse_args, ["--wait-timeout", "-2", "t"], "--wait-timeout: must be at least 0.0"),
    (umsrc.parse_args, ["-M", "ten", "t"], "-M/--messages: not an integer: ten"),
    (umreq.parse_args, ["-R", "-1", "t"], "-R/--requests: must be at least 0"),
    (umreq.parse_args, ["--response-timeout", "-1", "t"], "--response-timeout: must be at least 0.0"),
    (umresp.parse_args, ["-C", "-3", "t"], "-C/--count: must be at least 0"),
    (umresp.parse_args, ["--timeout", "x", "t"], "--timeout: not a number: x"),
]


@pytest.mark.parametrize("parse, argv, message", BAD, ids=[" ".join(argv) for _, argv, _ in BAD])
def test_a_bad_number_is_a_usage_error(parse, argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        parse(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_good_numbers_are_taken():
    args = umsrc.parse_args(["-M", "0", "-l", str(payload.MINIMUM_LENGTH), "-P", "2.5", "-W", "0", "t"])
    assert (args.messages, args.length, args.rate, args.wait_receivers) == (0, payload.MINIMUM_LENGTH, 2.5, 0)


def test_umrcv_refuses_a_negative_count():
    done = subprocess.run([sys.executable, "-m", "router.cli.umrcv", "-C", "-1", "t"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "-C/--count: must be at least 0" in done.stderr, done.stderr
