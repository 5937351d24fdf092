"""UM plain-text configuration: values, defaults, and errors that name file and line."""
import pytest

from router.um.config import ConfigError, UMConfig, from_overrides, load_file, parse_lines


def test_values_and_defaults(tmp_path):
    path = tmp_path / "lan.cfg"
    path.write_text("# a domain\ncontext resolver_multicast_address 239.1.2.3   # trailing comment\n"
                    "\nsource transport tcp\ncontext resolver_unicast_daemon 10.0.0.1:15380,10.0.0.2:15380\n")
    config = load_file(path)
    assert config.get("context", "resolver_multicast_address") == "239.1.2.3"
    assert config.get("context", "resolver_multicast_port") == 12965
    assert config.get("source", "transport") == "tcp"
    assert [d[:2] for d in config.get("context", "resolver_unicast_daemon")] == [("10.0.0.1", 15380), ("10.0.0.2", 15380)]
    assert config.get("source", "resolver_advertisement_sustain_interval") == 1000


@pytest.mark.parametrize("line, reason", [
    ("context no_such_option 1", "unknown option 'no_such_option'"),
    ("context resolver_multicast_port 70000", "outside 0..65535"),
    ("context resolver_multicast_address 10.1.1.1", "not a multicast address"),
    ("source transport carrier-pigeon", "not one of"),
    ("nonsense", "expected 'scope option value'"),
    ("planet resolver_multicast_port 1", "unknown scope 'planet'"),
    ("receiver resolver_multicast_port 1", "belongs to scope context"),
])
def test_errors_name_file_and_line(tmp_path, line, reason):
    path = tmp_path / "bad.cfg"
    path.write_text("# first line is fine\ncontext resolver_multicast_port 13000\n" + line + "\n")
    with pytest.raises(ConfigError) as caught:
        load_file(path)
    assert str(caught.value).startswith(f"{path}:3: ")
    assert reason in str(caught.value)
    assert caught.value.line == 3


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_file(tmp_path / "absent.cfg")


def test_overrides_take_python_values_and_scopes():
    config = from_overrides({"resolver_multicast_port": 13001, "source:transport": "lbtipc",
                             "resolver_unicast_daemon": [("127.0.0.1", 15380)]})
    assert config.get("context", "resolver_multicast_port") == 13001
    assert config.get("source", "transport") == "lbtipc"
    assert [d[:2] for d in config.get("context", "resolver_unicast_daemon")] == [("127.0.0.1", 15380)]
    with pytest.raises(ConfigError):
        from_overrides({"resolver_multicast_port": "x"})


def test_scopes_do_not_leak():
    config = parse_lines(["source implicit_batching_minimum_length 1"])
    merged = UMConfig().merged(config)
    assert merged.get("source", "implicit_batching_minimum_length") == 1


def test_a_dump_lists_every_option_of_a_scope_with_where_it_was_set(tmp_path):
    first, second = tmp_path / "first.cfg", tmp_path / "second.cfg"
    first.write_text("context resolver_multicast_port 13000\n# a comment\ncontext transport_tcp_port_low 15000\n")
    second.write_text("context transport_tcp_port_low 16000\n")
    config = load_file(first)
    later = load_file(second)
    merged = config.merged(later)
    rows = {row["option"]: row for row in merged.dump("context")}
    assert rows["resolver_multicast_port"] == {"option": "resolver_multicast_port", "value": "13000",
                                               "default": "12965", "set": True, "origin": f"{first}:1"}
    assert rows["transport_tcp_port_low"]["origin"] == f"{second}:1"        # the later file's line wins
    assert rows["resolver_multicast_ttl"] == {"option": "resolver_multicast_ttl", "value": "16", "default": "16",
                                              "set": False, "origin": None}
    assert rows["resolver_unicast_daemon"]["value"] == ""                    # none, not "None"
    assert all(row["option"] != "transport" for row in rows.values())       # a source option: not here

    program_set = merged.copy()
    program_set.set("context", "transport_tcp_port_low", "17000")           # by the program, no file
    shown = {row["option"]: row for row in program_set.dump("context")}["transport_tcp_port_low"]
    assert (shown["value"], shown["set"], shown["origin"]) == ("17000", True, None)
    assert merged.dump("context") == config.merged(later).dump("context")    # copies keep their origins
    assert merged == parse_lines(["context resolver_multicast_port 13000", "context transport_tcp_port_low 16000"])
