"""UM option values: what a number is, and ranges that name no value at all."""
import pytest
from hypothesis import given, strategies as st

from router.um.config import ConfigError, load_file, parse_lines
from router.um.context import Context
from tests.support.domains import new_domain


@pytest.mark.parametrize("text", ["13_965", "\u0661\u0663\u0669\u0666\u0665", "\uff11\uff13\uff19\uff16\uff15",
                                  "1 3965"])
def test_a_number_is_written_in_ascii_digits_only(text):
    # Python's int() takes digit-group underscores and any script's digits; UM's reader does not,
    # and "13_965" silently becoming 13965 hides a typo.
    with pytest.raises(ConfigError) as caught:
        parse_lines([f"context resolver_multicast_port {text}"], "lan.cfg")
    assert (caught.value.path, caught.value.line) == ("lan.cfg", 1)
    assert "is not an integer" in caught.value.reason


def test_a_huge_number_is_refused_without_repeating_it():
    with pytest.raises(ConfigError) as caught:
        parse_lines(["context resolver_multicast_port " + "9" * 5000], "lan.cfg")
    assert caught.value.reason == "a 5000-digit number is outside 0..65535"


@given(st.integers(min_value=0, max_value=65535), st.sampled_from(["{}", "+{}", "0x{:x}", "0X{:X}", "  {}  "]))
def test_decimal_and_hexadecimal_numbers_are_read(value, form):
    config = parse_lines([f"context resolver_multicast_port {form.format(value)}"])
    assert config.get("context", "resolver_multicast_port") == value


@given(st.text(st.sampled_from("0123456789abcdefxX_+- ") | st.characters(categories=("Nd", "No")),
               min_size=1, max_size=8).filter(str.strip))
def test_any_value_is_a_number_or_a_config_error(text):
    try:
        config = parse_lines([f"context resolver_multicast_ttl {text}"])
    except ConfigError:
        return
    assert 0 <= config.get("context", "resolver_multicast_ttl") <= 255
    assert text.strip().isascii()


@pytest.mark.parametrize("lines, option, line", [
    (["context transport_tcp_port_low 19000", "context transport_tcp_port_high 18000"],
     "transport_tcp_port_high", 2),
    (["context request_tcp_port_high 14000"], "request_tcp_port_high", 1),
    (["receiver transport_lbtru_port_low 30000"], "transport_lbtru_port_low", 1),
    (["context transport_lbtrm_multicast_address_low 239.0.0.9",
      "context transport_lbtrm_multicast_address_high 239.0.0.1"], "transport_lbtrm_multicast_address_high", 2),
    (["context transport_lbtipc_id_low 30000"], "transport_lbtipc_id_low", 1),
])
def test_a_low_above_its_high_is_an_error_at_the_line_that_set_it(tmp_path, lines, option, line):
    # An empty range passed every check and failed only when a source or request port was
    # wanted, long after start (every proxy source of the portal, each with a runtime error).
    path = tmp_path / "lan.cfg"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as caught:
        load_file(path).check_ranges()
    assert (caught.value.path, caught.value.line) == (str(path), line)
    assert option in caught.value.reason
    assert "must not be above" in caught.value.reason


def test_a_range_is_checked_once_every_layer_is_in():
    # A file may move the low end past the default high end that a later layer moves too.
    config = parse_lines(["context transport_tcp_port_low 20000"])
    config.set("context", "transport_tcp_port_high", "20009")
    config.check_ranges()


def test_an_application_context_with_an_empty_range_is_refused_at_its_creation(tmp_path):
    # Every context checks, not only a router's portals: an application's failed on its first source.
    path = tmp_path / "app.cfg"
    path.write_text("context transport_tcp_port_low 20010\ncontext transport_tcp_port_high 20000\n")
    with pytest.raises(ConfigError) as caught:
        Context(path)
    assert (caught.value.path, caught.value.line) == (str(path), 2)


MINIMUM_MAXIMUM_PAIRS = [
    ("source", "transport_lbtrm_sm_minimum_interval", "transport_lbtrm_sm_maximum_interval"),
    ("source", "transport_lbtru_sm_minimum_interval", "transport_lbtru_sm_maximum_interval"),
    ("source", "resolver_advertisement_minimum_initial_interval", "resolver_advertisement_maximum_initial_interval"),
    ("receiver", "resolver_query_minimum_initial_interval", "resolver_query_maximum_initial_interval"),
    ("wildcard_receiver", "resolver_query_minimum_interval", "resolver_query_maximum_interval"),
    ("receiver", "otr_request_minimum_interval", "otr_request_maximum_interval"),
]


@pytest.mark.parametrize("scope, minimum, maximum", MINIMUM_MAXIMUM_PAIRS)
def test_a_minimum_above_its_maximum_names_both_options_and_where_they_were_set(tmp_path, scope, minimum, maximum):
    # Accepted, the interval started above its cap: session messages, queries or OTR requests
    # went out at the minimum, then dropped to the maximum at the first doubling.
    path = tmp_path / "lan.cfg"
    path.write_text(f"{scope} {maximum} 300\n# between\n{scope} {minimum} 900\n")
    with pytest.raises(ConfigError) as caught:
        load_file(path).check_ranges()
    err = caught.value
    assert (err.path, err.line) == (str(path), 1)       # as for a range: at the maximum, if set
    assert f"{minimum} (900, set at {path}:3) must not be above {maximum} (300, set at {path}:1)" in err.reason


def test_a_minimum_above_a_default_maximum_says_it_is_the_default():
    with pytest.raises(ConfigError) as caught:
        parse_lines(["receiver otr_request_minimum_interval 20000"], "lan.cfg").check_ranges()
    assert "otr_request_maximum_interval (10000, the default)" in caught.value.reason


def test_a_resolver_phase_turned_off_by_a_zero_is_not_a_minimum_above_its_maximum():
    # 0 turns a resolver phase off (router.um.schedule.Phases.initial), whatever the other end says.
    parse_lines(["source resolver_advertisement_maximum_initial_interval 0",
                 "wildcard_receiver resolver_query_maximum_interval 0"]).check_ranges()


def test_an_application_context_with_a_minimum_above_its_maximum_is_refused_at_its_creation(tmp_path):
    path = tmp_path / "app.cfg"
    path.write_text("source transport_lbtrm_sm_minimum_interval 20000\n")
    with pytest.raises(ConfigError) as caught:
        Context(path)
    assert (caught.value.path, caught.value.line) == (str(path), 1)
    assert "transport_lbtrm_sm_maximum_interval (10000, the default)" in caught.value.reason


def test_a_sources_own_options_with_a_minimum_above_its_maximum_are_refused_at_its_creation(tmp_path):
    # A source's own options (a UM XML file's per-topic ones) replace the context's for it: they
    # must pass the same checks the context's passed when it was made.
    domain = new_domain(tmp_path)
    with Context(**domain.overrides()) as context:
        own = context.config.copy()
        own.set("source", "transport_lbtrm_sm_minimum_interval", "20000")
        with pytest.raises(ConfigError, match="transport_lbtrm_sm_maximum_interval"):
            context.source("own.options", options=own)
