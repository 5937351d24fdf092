"""UM XML configuration files (`<um-configuration version="1.0">`): templates, applications, contexts, topics.

    config = load_xml_config("um.xml", application="tnwgd", context="endpt_1")
    per_topic = topic_options("um.xml", "tnwgd", "endpt_1", "LBTRM_TOPIC")

Options are layered the way UM applies them, later layers winning:
application template(s) -> <contexts> template -> <context> template -> the context's own <options>
-> <sources>/<receivers>/<wildcard-receivers> templates (their scope only) -> for one topic, the
matching <topic> template and <options> (source options under <sources>, receiver options under
<receivers>). A `template` attribute may list several templates, comma-separated; the last wins.

What the library does not use is accepted and ignored: <license>, <application-data>, <event-queues>,
<hfxs>, the `order`/`rule` constraints and <allow>/<deny>. Unknown elements, attributes and option
names are errors naming file, line and element, because a typo there silently loses a setting.

`XmlFile` (line numbers, XIncludes, the file each element came from) is shared with router.config.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Iterator

from lxml import etree

from router.um.config import UTF8_BOM, UTF16_BOMS, ConfigError, UMConfig
from router.um.options import OptionError, lookup

ROUTER_APPLICATION = "tnwgd"    # the application name the router's contexts look up (seed §4.1)

XINCLUDE_TAGS = ("{http://www.w3.org/2001/XInclude}include", "{http://www.w3.org/2003/XInclude}include")
XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"
MAX_INCLUDE_DEPTH = 10


class XmlFile:
    """An XML file parsed with line numbers and its XIncludes expanded.

    libxml2 marks included elements with xml:base only when they come from another directory, so
    the origin of every included subtree is recorded here instead; errors then name the right file.
    """

    def __init__(self, path: str | Path):
        self.path = str(path)
        self._origins: dict[etree._Element, str] = {}
        # A hash of the bytes parsed, per local file: what this tree says is what that content says,
        # whatever the file holds by the time someone looks at it again.
        self.digests: dict[str, str] = {}
        # The file's own text as parsed (None when fetched by address): what runs, shown as such
        # however the file is edited afterwards.
        self.text: str | None = None
        self.root = self._parse(Path(path), self.path).getroot()
        self._expand(self.root, Path(path), (str(Path(path).resolve()),))

    def _parse(self, path: Path | str, name: str) -> etree._ElementTree:
        """Parse a file of this tree, known as `name` (the name its errors give)."""
        tree, data = _parse(path)
        if data is not None:
            self.digests[name] = _hash(data)
            if name == self.path:
                self.text = data.decode(errors="replace")
        return tree

    def changed(self) -> bool:
        """Whether a local file of this tree now holds other bytes than those parsed (by content:
        an edit can keep a file's size and, on a coarse clock or filesystem, its timestamp)."""
        for name, digest in self.digests.items():
            try:
                now = _hash(Path(name).read_bytes())
            except OSError:
                return True
            if now != digest:
                return True
        return False

    def where(self, element: etree._Element) -> tuple[str, int | None]:
        """(file, line) of an element, the file being the included one where that applies."""
        for node in (element, *element.iterancestors()):
            if node in self._origins:
                return self._origins[node], element.sourceline
        return self.path, element.sourceline

    def error(self, element: etree._Element, message: str) -> ConfigError:
        path, line = self.where(element)
        return ConfigError(message, path, line, _tag(element))

    def _expand(self, root: etree._Element, path: Path, chain: tuple[str, ...]) -> None:
        for include in list(root.iter(*XINCLUDE_TAGS)):
            href = include.get("href")
            if not href or include.get("parse", "xml") != "xml" or include.get("xpointer"):
                raise self.error(include, "an XInclude needs href= and includes a whole XML file "
                                          "(no parse=\"text\", no xpointer)")
            target = _include_target(href, path)
            if target is None:
                raise self.error(include, f"cannot include '{href}': only local files, http: and ftp: "
                                          "are supported")
            if str(target) in chain or len(chain) > MAX_INCLUDE_DEPTH:
                raise self.error(include, f"XInclude loop: '{href}' includes itself")
            parent = include.getparent()
            if parent is None:
                raise self.error(include, "the root element cannot be an XInclude")
            try:
                included = self._parse(target, str(target)).getroot()
            except ConfigError as err:
                if err.line is not None:      # a syntax error inside the included file
                    raise
                raise self.error(include, f"cannot include '{href}': {err.reason}") from None
            self._origins[included] = str(target)
            self._expand(included, Path(target), chain + (str(target),))
            included.tail = include.tail
            parent.replace(include, included)


def _include_target(href: str, including: Path) -> Path | str | None:
    """Where an href points (relative to the including file); None for schemes the DRO refuses."""
    scheme = href.split(":", 1)[0].lower() if re.match(r"^[A-Za-z][A-Za-z0-9+.-]+:", href) else ""
    if scheme in ("http", "ftp"):
        return href                    # libxml2 fetches these itself, as the DRO does
    if scheme and scheme != "file":
        return None
    local = href[len("file://"):] if scheme == "file" else href
    return (including.parent / local).resolve()


def _parse(path: Path | str) -> tuple[etree._ElementTree, bytes | None]:
    """Parse one file, and its bytes (None for an http: or ftp: address); syntax errors become
    ConfigErrors with the line libxml2 reports.

    Entities the file's own DOCTYPE defines with a value (`<!ENTITY site "NYC">`) are expanded,
    in text and in markup, as libxml2 does for the DRO and UM; left unexpanded they would vanish
    from the tree (a name losing its "&site;" part, a whole shared block of options or portals
    dropped without a word). External entities (SYSTEM / PUBLIC) are never read: a configuration
    file must not pull in other files that way, let alone addresses. libxml2 bounds how far
    entities may amplify the text, so nested ones cannot blow up memory."""
    parser = etree.XMLParser(remove_comments=False, resolve_entities="internal", no_network=False)
    if isinstance(path, Path) and not path.is_file():
        raise ConfigError("no such file" if not path.exists() else "not a regular file", str(path))
    try:
        if not isinstance(path, Path):          # http: / ftp:, fetched by libxml2
            return etree.parse(path, parser), None
        data = path.read_bytes()                # the bytes parsed are the bytes hashed
        return etree.ElementTree(etree.fromstring(data, parser, base_url=str(path))), data
    except etree.XMLSyntaxError as err:
        raise _syntax_error(err, str(path)) from None
    except OSError as err:
        raise ConfigError(f"cannot read: {err}", str(path)) from None


def _syntax_error(err: etree.XMLSyntaxError, path: str) -> ConfigError:
    """libxml2's wording, with the common cases made plain."""
    message = re.sub(r", line \d+, column \d+$", "", err.msg or "malformed XML")
    element = None
    mismatch = re.match(r"Opening and ending tag mismatch: (\S+) line (\d+) and (\S+)", message)
    if mismatch:
        opened, line, element = mismatch.groups()
        message = f"closing tag </{element}> does not match <{opened}> opened on line {line}"
    elif "AttValue" in message or "attributes construct error" in message:
        message = "attribute values must be quoted, e.g. name=\"value\""
    elif message.startswith("Premature end of data"):
        message = "the file ends before all elements are closed"
    elif re.match(r"Entity '[^']*' not defined", message):
        message += (" (only entities declared with a value in the file's own DOCTYPE are expanded; "
                    "external SYSTEM or PUBLIC entities are refused)")
    elif "amplification" in message:
        message = "entities expand to far more text than the file holds (entities nested in entities); refused"
    filename, line = err.filename, err.lineno
    if not filename or filename == "<string>":     # inside an entity's text: libxml2 has no place for it
        filename, line = path, None
    return ConfigError(f"malformed XML: {message}", filename, line, element)


def _tag(element: etree._Element) -> str:
    """The tag as written: 'xi:include' rather than '{http://www.w3.org/2001/XInclude}include'."""
    if element.tag.startswith("{"):
        local = etree.QName(element).localname
        return f"{element.prefix}:{local}" if element.prefix else local
    return element.tag


def children(element: etree._Element, *tags: str) -> Iterator[etree._Element]:
    """Element children (comments and processing instructions skipped), optionally by tag."""
    for child in element:
        if isinstance(child.tag, str) and (not tags or child.tag in tags):
            yield child


# ---------------------------------------------------------------------------- structure

_CHILDREN: dict[str, tuple[str, ...]] = {
    "um-configuration": ("license", "templates", "applications"),
    "templates": ("template",), "template": ("options",),
    "options": ("option", "application-data"), "option": ("allow", "deny"),
    "applications": ("application",),
    "application": ("contexts", "event-queues", "hfxs", "application-data"),
    "contexts": ("context",), "event-queues": ("event-queue",), "hfxs": ("topic",),
    "event-queue": ("options",), "context": ("sources", "receivers", "wildcard-receivers", "options"),
    "sources": ("topic",), "receivers": ("topic",), "wildcard-receivers": ("wildcard-receiver",),
    "topic": ("options",), "wildcard-receiver": ("options",),
    "license": (), "application-data": (), "allow": (), "deny": (),
}
_GROUP = ("template", "order")
_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "um-configuration": ("version",), "license": ("format", XML_SPACE), "templates": (),
    "template": ("name",), "options": ("type",), "option": ("name", "default-value", "order"),
    "applications": (), "application": ("name", "template"),
    "contexts": _GROUP, "event-queues": _GROUP, "hfxs": _GROUP, "sources": _GROUP,
    "receivers": _GROUP, "wildcard-receivers": _GROUP,
    "event-queue": ("name", "template", "rule"), "context": ("name", "template", "rule"),
    "topic": ("template", "rule", "pattern", "topicname"),
    "wildcard-receiver": ("template", "rule", "pattern", "pattern-type"),
    "application-data": (XML_SPACE,), "allow": (XML_SPACE,), "deny": (XML_SPACE,),
}
_REQUIRED = {"um-configuration": ("version",), "template": ("name",), "option": ("name",)}
# <options type> as UM spells it, plus the underscore spelling of the plain-text files' scopes.
_OPTION_TYPES = {"context": "context", "source": "source", "receiver": "receiver",
                 "wildcard-receiver": "wildcard_receiver", "wildcard_receiver": "wildcard_receiver",
                 "event-queue": "event_queue", "event_queue": "event_queue", "hfx": "hfx"}


def _check_structure(doc: XmlFile) -> None:
    root = doc.root
    if root.tag != "um-configuration":
        raise doc.error(root, "the root element of a UM XML configuration file is <um-configuration>")
    for element in root.iter():
        if not isinstance(element.tag, str):
            continue
        for name in element.attrib:
            if name not in _ATTRIBUTES[element.tag]:
                shown = "xml:space" if name == XML_SPACE else name
                hint = " (did you mean default-value?)" if element.tag == "option" and name == "value" else ""
                raise doc.error(element, f"unknown attribute '{shown}'{hint}")
        for name in _REQUIRED.get(element.tag, ()):
            if element.get(name) is None:
                raise doc.error(element, f"missing required attribute '{name}'")
        for child in children(element):
            if child.tag not in _CHILDREN:
                raise doc.error(child, f"unknown element in <{element.tag}>")
            if child.tag not in _CHILDREN[element.tag]:
                allowed = ", ".join(_CHILDREN[element.tag]) or "nothing"
                raise doc.error(child, f"not allowed inside <{element.tag}> (allowed: {allowed})")
        if element.tag in ("topic", "wildcard-receiver") and element.getparent().tag != "hfxs":
            _check_topic_selector(doc, element)


def _check_topic_selector(doc: XmlFile, element: etree._Element) -> None:
    name, pattern = element.get("topicname"), element.get("pattern")
    if element.tag == "topic" and (name is None) == (pattern is None):
        raise doc.error(element, "give exactly one of topicname and pattern")
    if pattern is not None and element.get("pattern-type") != "application-callback":
        try:
            re.compile(pattern)
        except re.error as err:
            raise doc.error(element, f"invalid pattern '{pattern}': {err}") from None


# ---------------------------------------------------------------------------- options

class UMXmlDocument:
    """One checked UM XML file: structure, template references and every option name and value."""

    def __init__(self, path: str | Path):
        self.file = XmlFile(path)
        _check_structure(self.file)
        self.templates: dict[str, etree._Element] = {}
        for template in self.file.root.iter("template"):
            name = template.get("name")
            if name in self.templates:
                first = self.templates[name].sourceline
                raise self.file.error(template, f"template '{name}' is already defined on line {first}")
            self.templates[name] = template
        for element in self.file.root.iter():
            if isinstance(element.tag, str) and element.get("template") is not None:
                self._templates_of(element)
        for options in self.file.root.iter("options"):
            self.apply(UMConfig(), options)

    def apply(self, config: UMConfig, options: etree._Element, only_scope: str | None = None) -> None:
        """Set the default-values of one <options> element (of `only_scope`, if given) into config."""
        scope = _scope_of(self.file, options)
        if scope == "hfx" or (only_scope is not None and scope != only_scope):
            return              # HFX objects do not exist in this library; other scopes do not apply here
        for option in children(options, "option"):
            self._set(config, scope, option)

    def apply_templates(self, config: UMConfig, owner: etree._Element, only_scope: str | None = None) -> None:
        for template in self._templates_of(owner):
            for options in children(template, "options"):
                self.apply(config, options, only_scope)

    def application(self, name: str | None) -> etree._Element | None:
        """The <application> for `name` (None = the unnamed one); None when the file has none at all."""
        found = [a for a in self.file.root.iter("application") if a.get("name") == name]
        if found:
            return found[0]
        names = [a.get("name") for a in self.file.root.iter("application")]
        if not names:
            return None
        listed = ", ".join(f"'{n}'" if n is not None else "(unnamed)" for n in names)
        wanted = f'<application name="{name}">' if name is not None else "an unnamed <application>"
        raise self.file.error(self.file.root, f"no {wanted} in this file (it has {listed})")

    def contexts(self, application: etree._Element, name: str | None) -> Iterator[tuple[etree._Element, etree._Element]]:
        """(<contexts>, <context>) pairs matching a context name; None matches unnamed <context>s."""
        for group in children(application, "contexts"):
            for context in children(group, "context"):
                if context.get("name") == name:
                    yield group, context

    def _set(self, config: UMConfig, scope: str, option: etree._Element) -> None:
        name, value = option.get("name"), option.get("default-value")
        path, line = self.file.where(option)
        try:
            if value is None:       # only allow/deny constraints: check the name, set nothing
                lookup(scope, name)
            else:
                config.set(scope, name, value, (path, line))
        except (ConfigError, OptionError) as err:
            reason = getattr(err, "reason", str(err))
            if name not in reason:
                reason = f"option '{name}': {reason}"
            raise ConfigError(reason, path, line, "option") from None

    def _templates_of(self, owner: etree._Element) -> list[etree._Element]:
        names = [n.strip() for n in (owner.get("template") or "").split(",") if n.strip()]
        missing = [n for n in names if n not in self.templates]
        if missing:
            raise self.file.error(owner, f"unknown template '{missing[0]}'")
        return [self.templates[n] for n in names]


def _scope_of(doc: XmlFile, options: etree._Element) -> str:
    kind = options.get("type")
    if kind not in _OPTION_TYPES:
        known = "context, source, receiver, wildcard-receiver, event-queue, hfx"
        raise doc.error(options, f"type=\"{kind}\" is not an option type ({known})" if kind
                        else f"<options> needs a type attribute ({known})")
    return _OPTION_TYPES[kind]


_documents: dict[str, UMXmlDocument] = {}


def read_document(path: str | Path) -> UMXmlDocument:
    """The checked document, re-read only when the file (or a file it includes) has changed."""
    key = str(Path(path).resolve())
    cached = _documents.get(key)
    if cached is not None and not cached.file.changed():
        return cached
    document = UMXmlDocument(path)
    _documents[key] = document
    return document


def _document(source: str | Path | UMXmlDocument) -> UMXmlDocument:
    """A document already read (what a running configuration was loaded from, whatever the file
    holds now), or the file at a path as it is now."""
    return source if isinstance(source, UMXmlDocument) else read_document(source)


def _hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_xml_config(path: str | Path) -> None:
    """Check a whole file (structure, templates, every option) without selecting anything."""
    read_document(path)


def content_digest(sources) -> str:
    """A hash of what UM XML files (paths or documents read) say, as they were parsed, XIncluded
    parts (local or http:/ftp:) included: their elements, attributes and text. Comments, processing
    instructions and layout are not part of it, so documenting a file (shared by every portal
    through <xml-config>) restarts no portal at a reload, while any edit of an option does."""
    sha = hashlib.sha256()
    for source in sources:
        _hash_meaning(sha, _document(source).file.root)
        sha.update(b"\1")
    return sha.hexdigest()


def _hash_meaning(sha, element: etree._Element) -> None:
    text = (element.text or "") + "".join(child.tail or "" for child in element if not isinstance(child.tag, str))
    sha.update(repr((element.tag, sorted(element.attrib.items()), text.strip())).encode("utf-8", "surrogateescape"))
    for child in children(element):
        _hash_meaning(sha, child)
    sha.update(b"\0")             # the end of this element's children: nesting is part of the meaning


def is_xml_config(path: str | Path) -> bool:
    """True when a UM configuration file is XML rather than plain text (its first character is '<').
    A byte-order mark comes before that character: editors write one, and XML allows it."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(512)
    except OSError:
        return False
    if head.startswith(UTF16_BOMS):
        return head.decode("utf-16", errors="replace").lstrip().startswith("<")
    return head.removeprefix(UTF8_BOM).lstrip().startswith(b"<")


def load_xml_config(path: str | Path | UMXmlDocument, application: str | None = None,
                    context: str | None = None, into: UMConfig | None = None) -> UMConfig:
    """Options for one context of one application (None = the unnamed one), layered as UM does.
    `path` may be a document already read (read_document), to apply what it said when read."""
    document = _document(path)
    config = into if into is not None else UMConfig()
    app = document.application(application)
    if app is None:
        return config
    document.apply_templates(config, app)
    for group, element in document.contexts(app, context):
        document.apply_templates(config, group)
        document.apply_templates(config, element)
        for options in children(element, "options"):
            document.apply(config, options)
        for tag, scope in _OBJECT_GROUPS.items():
            for objects in children(element, tag):
                document.apply_templates(config, objects, scope)
    return config


_OBJECT_GROUPS = {"sources": "source", "receivers": "receiver", "wildcard-receivers": "wildcard_receiver"}


def topic_options(path: str | Path | UMXmlDocument, application: str | None, context: str | None, topic: str,
                  into: UMConfig | None = None) -> UMConfig:
    """The context's options plus those of every <topic> under <sources>/<receivers> matching `topic`."""
    def matching(element: etree._Element):
        for tag in ("sources", "receivers"):
            for objects in children(element, tag):
                for entry in children(objects, "topic"):
                    if _topic_matches(entry, topic):
                        yield entry, _OBJECT_GROUPS[tag]
    return _with_objects(path, application, context, into, matching)


def pattern_options(path: str | Path | UMXmlDocument, application: str | None, context: str | None, pattern: str,
                    into: UMConfig | None = None) -> UMConfig:
    """The context's options plus those of the <wildcard-receiver> whose pattern is `pattern`."""
    def matching(element: etree._Element):
        for objects in children(element, "wildcard-receivers"):
            for entry in children(objects, "wildcard-receiver"):
                if entry.get("pattern") == pattern:
                    yield entry, "wildcard_receiver"
    return _with_objects(path, application, context, into, matching)


def _topic_matches(entry: etree._Element, topic: str) -> bool:
    if entry.get("topicname") is not None:
        return entry.get("topicname") == topic
    return re.search(entry.get("pattern"), topic) is not None


def _with_objects(path, application, context, into, matching) -> UMConfig:
    """Context options, then the templates and <options> of the matching object elements."""
    document = _document(path)
    config = load_xml_config(document, application, context, into)
    app = document.application(application)
    for _, element in document.contexts(app, context) if app is not None else ():
        for entry, scope in matching(element):
            document.apply_templates(config, entry, scope)
            for options in children(entry, "options"):
                document.apply(config, options, scope)
    return config
