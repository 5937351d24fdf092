"""The example tools refuse negative counts, rates and times (and umsrc a message shorter than its
payload header) as usage errors, exit status 2 with the bound named, instead of running with them:
a negative message count sent nothing and reported success, a negative rate sent unpaced."""
import subprocess
import sys

import pytest

from router.cli import common, payload, routerctl, ummon, umreq, umresp, umsrc

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
    # nan passes every comparison with a bound, and inf is no rate, count or number of seconds.
    (umsrc.parse_args, ["-P", "nan", "t"], "-P/--rate: not a finite number: nan"),
    (umsrc.parse_args, ["-P", "inf", "t"], "-P/--rate: not a finite number: inf"),
    (umsrc.parse_args, ["-L", "NaN", "t"], "-L/--linger: not a finite number: NaN"),
    (umsrc.parse_args, ["--wait-timeout", "inf", "t"], "--wait-timeout: not a finite number: inf"),
    (umreq.parse_args, ["--response-timeout", "nan", "t"], "--response-timeout: not a finite number: nan"),
    (umresp.parse_args, ["--timeout=-inf", "t"], "--timeout: not a finite number: -inf"),
    (ummon.main, ["--timeout", "nan"], "--timeout: not a finite number: nan"),
    (ummon.main, ["--timeout", "inf"], "--timeout: not a finite number: inf"),
    (ummon.main, ["--timeout", "-1"], "--timeout: must be at least 0.0"),
    (ummon.main, ["-C", "-1"], "-C/--count: must be at least 0"),
    (routerctl.main, ["--timeout", "nan", "status"], "--timeout: not a finite number: nan"),
    (routerctl.main, ["status", "--timeout", "inf"], "--timeout: not a finite number: inf"),
    (routerctl.main, ["--timeout", "0", "status"], "--timeout: must be greater than 0.0"),
    (routerctl.main, ["--timeout", "86401", "status"], "--timeout: must be at most 86400.0"),
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


def test_a_finite_number_within_the_bounds_is_taken():
    check = common.at_least(0.0, float, above=True, at_most=10.0)
    assert (check("0.001"), check("10"), check("1e1")) == (0.001, 10.0, 10.0)
    assert common.at_least(-1)("-1") == -1


def test_umrcv_refuses_a_negative_count():
    done = subprocess.run([sys.executable, "-m", "router.cli.umrcv", "-C", "-1", "t"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "-C/--count: must be at least 0" in done.stderr, done.stderr
