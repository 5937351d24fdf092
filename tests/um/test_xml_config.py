"""UM XML configuration files: templates and layering as UM applies them, errors naming file and line."""
from __future__ import annotations

import textwrap

import pytest

from router.um.config import ConfigError, UMConfig
from router.um.xml_config import (ROUTER_APPLICATION, check_xml_config, is_xml_config, load_xml_config,
                                  pattern_options, topic_options)

# Seed 001 §4.1.2.1 (sample-config.xml), with values for its "#.#.#.#" placeholders and lbtipc for lbtrm.
SEED_SAMPLE = """\
<?xml version="1.0" encoding="UTF-8" ?>
<um-configuration version="1.0">
  <templates>
    <template name="tnwgd-common">
      <options type="source">
        <option name="transport" default-value="tcp" />
      </options>
      <options type="context">
        <option name="request_tcp_interface" default-value="10.29.3.0/24" />
        <option name="transport_tcp_port_low" default-value="18000" />
        <option name="transport_tcp_port_high" default-value="18999" />
        <option name="resolver_multicast_address" default-value="225.7.32.85"/>
      </options>
    </template>
    <template name="ipc-source">
      <options type="source">
        <option name="transport" default-value="lbtipc" />
      </options>
    </template>
  </templates>
  <applications>
    <application name="tnwgd" template="tnwgd-common">
      <contexts>
        <context>
          <sources template="ipc-source">
            <topic topicname="TCP_TOPIC">
              <options type="source">
                <option name="transport" default-value="tcp" />
              </options>
            </topic>
          </sources>
        </context>
      </contexts>
    </application>
  </applications>
</um-configuration>
"""


def write(tmp_path, text: str, name: str = "um.xml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def wrap(applications: str = "", templates: str = "") -> str:
    return (f'<um-configuration version="1.0">\n<templates>{templates}</templates>\n'
            f'<applications>{applications}</applications>\n</um-configuration>\n')


def template(name: str, kind: str, **options) -> str:
    body = "".join(f'<option name="{k}" default-value="{v}"/>' for k, v in options.items())
    return f'<template name="{name}"><options type="{kind}">{body}</options></template>'


def error_of(call) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        call()
    return caught.value


def test_seed_sample_applies_application_and_source_templates(tmp_path):
    path = write(tmp_path, SEED_SAMPLE)
    config = load_xml_config(path, ROUTER_APPLICATION)
    assert config.get("context", "resolver_multicast_address") == "225.7.32.85"
    assert config.get("context", "transport_tcp_port_low") == 18000
    assert config.get("source", "transport") == "lbtipc"          # <sources template="ipc-source">
    assert config.get("context", "resolver_multicast_port") == 12965   # untouched: UM default
    assert topic_options(path, "tnwgd", None, "TCP_TOPIC").get("source", "transport") == "tcp"
    assert topic_options(path, "tnwgd", None, "OTHER").get("source", "transport") == "lbtipc"


def test_layers_apply_in_ums_order(tmp_path):
    templates = (template("app", "context", resolver_multicast_port=1, transport_tcp_port_low=1,
                          transport_tcp_port_high=1, request_tcp_port_low=1)
                 + template("group", "context", transport_tcp_port_low=2, transport_tcp_port_high=2,
                            request_tcp_port_low=2)
                 + template("ctx", "context", transport_tcp_port_high=3, request_tcp_port_low=3))
    apps = ('<application name="a" template="app"><contexts template="group">'
            '<context name="c" template="ctx"><options type="context">'
            '<option name="request_tcp_port_low" default-value="4"/></options></context>'
            '</contexts></application>')
    config = load_xml_config(write(tmp_path, wrap(apps, templates)), "a", "c")
    assert [config.get("context", n) for n in ("resolver_multicast_port", "transport_tcp_port_low",
                                                "transport_tcp_port_high", "request_tcp_port_low")] == [1, 2, 3, 4]


def test_template_lists_apply_left_to_right(tmp_path):
    templates = template("one", "context", resolver_multicast_port=1) + template("two", "context", resolver_multicast_port=2)
    apps = '<application template="one, two"><contexts><context/></contexts></application>'
    assert load_xml_config(write(tmp_path, wrap(apps, templates))).get("context", "resolver_multicast_port") == 2


def test_object_templates_only_set_their_own_scope(tmp_path):
    mixed = ('<template name="mixed"><options type="context"><option name="resolver_multicast_port" default-value="9"/>'
             '</options><options type="receiver"><option name="resolver_query_sustain_interval" default-value="7"/>'
             '</options></template>')
    apps = '<application><contexts><context><receivers template="mixed"/></context></contexts></application>'
    config = load_xml_config(write(tmp_path, wrap(apps, mixed)))
    assert config.get("receiver", "resolver_query_sustain_interval") == 7
    assert config.get("context", "resolver_multicast_port") == 12965


def test_contexts_are_selected_by_name(tmp_path):
    apps = ('<application name="tnwgd"><contexts>'
            '<context name="east"><options type="context"><option name="resolver_multicast_port" default-value="1"/></options></context>'
            '<context><options type="context"><option name="resolver_multicast_port" default-value="2"/></options></context>'
            '</contexts></application>')
    path = write(tmp_path, wrap(apps))
    assert load_xml_config(path, "tnwgd", "east").get("context", "resolver_multicast_port") == 1
    assert load_xml_config(path, "tnwgd", None).get("context", "resolver_multicast_port") == 2
    assert load_xml_config(path, "tnwgd", "west").values == {}       # no element: nothing applied


def test_topic_patterns_and_wildcard_receivers(tmp_path):
    apps = ('<application><contexts><context>'
            '<receivers order="deny,allow"><topic pattern="^md\\." rule="allow"><options type="receiver">'
            '<option name="resolver_query_sustain_interval" default-value="5"/></options></topic></receivers>'
            '<wildcard-receivers><wildcard-receiver pattern="^md\\..*" pattern-type="pcre">'
            '<options type="wildcard_receiver"><option name="resolver_query_maximum_interval" default-value="9"/>'
            '</options></wildcard-receiver></wildcard-receivers>'
            '</context></contexts></application>')
    path = write(tmp_path, wrap(apps))
    assert topic_options(path, None, None, "md.prices").get("receiver", "resolver_query_sustain_interval") == 5
    assert topic_options(path, None, None, "news").get("receiver", "resolver_query_sustain_interval") == 1000
    assert pattern_options(path, None, None, "^md\\..*").get("wildcard_receiver", "resolver_query_maximum_interval") == 9


def test_unused_parts_are_accepted(tmp_path):
    text = ('<um-configuration version="1.0"><license format="string">x</license><templates>'
            '<template name="t"><options type="hfx"><option name="anything" default-value="1"/></options>'
            '<options type="event-queue"><application-data>notes</application-data></options></template></templates>'
            '<applications><application><application-data>x</application-data><event-queues template="t">'
            '<event-queue name="eq" rule="allow"/></event-queues><hfxs><topic topicname="x"/></hfxs>'
            '<contexts order="deny,allow"><context rule="allow"><options type="context">'
            '<option name="resolver_multicast_port" order="deny,allow"><deny>0</deny></option>'
            '</options></context></contexts></application></applications></um-configuration>')
    assert load_xml_config(write(tmp_path, text)).values == {}


def test_into_is_updated_and_xml_wins(tmp_path):
    apps = ('<application><contexts><context><options type="context">'
            '<option name="resolver_multicast_port" default-value="14000"/></options></context></contexts></application>')
    base = UMConfig()
    base.set("context", "resolver_multicast_port", "13000")
    base.set("context", "transport_tcp_port_low", "15000")
    result = load_xml_config(write(tmp_path, wrap(apps)), into=base)
    assert result is base
    assert (base.get("context", "resolver_multicast_port"), base.get("context", "transport_tcp_port_low")) == (14000, 15000)


def test_a_missing_application_is_an_error_unless_there_are_none(tmp_path):
    path = write(tmp_path, wrap('<application name="umsrc"><contexts/></application>'))
    err = error_of(lambda: load_xml_config(path, "tnwgd"))
    assert (err.line, err.element) == (1, "um-configuration")
    assert err.reason == "no <application name=\"tnwgd\"> in this file (it has 'umsrc')"
    assert load_xml_config(write(tmp_path, wrap(), "templates-only.xml"), "tnwgd").values == {}


def test_changes_to_the_file_are_seen(tmp_path):
    path = write(tmp_path, wrap(templates=template("t", "context", resolver_multicast_port=1)))
    check_xml_config(path)
    path.write_text(wrap(templates=template("t", "context", resolver_multicast_port=70000)))
    with pytest.raises(ConfigError, match="70000 is outside"):
        check_xml_config(path)


def test_xinclude_and_errors_in_included_files(tmp_path):
    write(tmp_path, '<templates>\n' + template("t", "context", resolver_multicast_prot=1) + '\n</templates>\n', "t.xml")
    path = write(tmp_path, '<um-configuration version="1.0">\n'
                           '<xi:include xmlns:xi="http://www.w3.org/2001/XInclude" href="t.xml"/>\n'
                           '</um-configuration>\n')
    err = error_of(lambda: check_xml_config(path))
    assert str(err).startswith(f"{tmp_path / 't.xml'}:2: <option>: unknown option 'resolver_multicast_prot'")


@pytest.mark.parametrize("body, line, element, reason", [
    ('<templates>\n<template name="t"><options type="context">\n<option name="no_such" default-value="1"/>'
     '</options></template></templates>', 4, "option", "unknown option 'no_such'"),
    ('<templates>\n<template name="t"><options type="context">\n<option name="resolver_multicast_port" '
     'default-value="x"/></options></template></templates>', 4, "option",
     "option 'resolver_multicast_port': 'x' is not an integer"),
    ('<templates>\n<template name="t"><options type="source">\n<option name="resolver_multicast_port"/>'
     '</options></template></templates>', 4, "option", "belongs to scope context, not source"),
    ('<templates>\n<template name="t"><options type="context">\n<option name="transport_tcp_port_low" '
     'value="1"/></options></template></templates>', 4, "option",
     "unknown attribute 'value' (did you mean default-value?)"),
    ('<templates>\n<template name="t"><optoins type="context"/></template></templates>', 3, "optoins",
     "unknown element in <template>"),
    ('<templates>\n<template name="t"><options/></template></templates>', 3, "options",
     "<options> needs a type attribute"),
    ('<templates>\n<template name="t"><options type="topic"/></template></templates>', 3, "options",
     'type="topic" is not an option type'),
    ('<applications>\n<application template="nope"/></applications>', 3, "application", "unknown template 'nope'"),
    ('<templates>\n<template name="t"/>\n<template name="t"/></templates>', 4, "template",
     "template 't' is already defined on line 3"),
    ('<applications>\n<application><contexts><context><sources>\n<topic topicname="a" pattern="b"/>'
     '</sources></context></contexts></application></applications>', 4, "topic",
     "give exactly one of topicname and pattern"),
    ('<applications>\n<application><contexts><context><receivers>\n<topic pattern="(x"/>'
     '</receivers></context></contexts></application></applications>', 4, "topic", "invalid pattern '(x'"),
    ('<applications>\n<application><contexts>\n<sources/></contexts></application></applications>', 4, "sources",
     "not allowed inside <contexts> (allowed: context)"),
])
def test_errors_name_file_line_and_element(tmp_path, body, line, element, reason):
    path = write(tmp_path, f'<?xml version="1.0"?>\n<um-configuration version="1.0">{body}</um-configuration>\n')
    err = error_of(lambda: load_xml_config(path))
    assert str(err).startswith(f"{path}:{line}: <{element}>: "), str(err)
    assert reason in err.reason


def test_malformed_and_foreign_files_are_errors(tmp_path):
    err = error_of(lambda: load_xml_config(write(tmp_path, "<um-configuration version='1.0'>\n<templates>\n")))
    assert err.line == 3 and "malformed XML" in err.reason
    err = error_of(lambda: load_xml_config(write(tmp_path, '<tnw-gateway version="1.0"/>', "gw.xml")))
    assert err.reason == "the root element of a UM XML configuration file is <um-configuration>"
    assert error_of(lambda: load_xml_config(tmp_path / "absent.xml")).reason == "no such file"


def test_xml_files_are_told_from_plain_text(tmp_path):
    assert is_xml_config(write(tmp_path, SEED_SAMPLE))
    assert not is_xml_config(write(tmp_path, "context resolver_multicast_port 13000\n", "lan.cfg"))
