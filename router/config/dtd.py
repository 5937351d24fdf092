"""The tnw-gateway DTD: printing it (`tnwgd -d`), validating against it, explaining failures.

lxml (libxml2) decides whether a file is valid. Its messages name the parent element and its line
("Element endpoint content does not follow the DTD, expecting (name , domain-id , ...), got (...)"),
which leaves the operator to diff two lists. So when validation fails, the tree is walked again
with the DTD's own content models and the first problem is reported at the offending child:
"element 'cost' is not allowed here: expected <domain-id>", "missing required element <domain-id>",
"unknown element 'costs'", "attribute 'version' must be 1.0, got '2.0'".
"""
from __future__ import annotations

import difflib
import functools
from pathlib import Path

from lxml import etree

from router.um.config import ConfigError
from router.um.xml_config import XmlFile, children

DTD_PATH = Path(__file__).with_name("tnwgd.dtd")
XML_NAMESPACE = "{http://www.w3.org/XML/1998/namespace}"
ROOT = "tnw-gateway"


def dump_dtd() -> str:
    """The commented DTD, as `tnwgd -d` prints it."""
    return DTD_PATH.read_text()


@functools.cache
def gateway_dtd() -> etree.DTD:
    return etree.DTD(str(DTD_PATH))


@functools.cache
def _declarations() -> dict[str, etree._DTDElementDecl]:
    return {decl.name: decl for decl in gateway_dtd().elements()}


def check_against_dtd(source: XmlFile) -> None:
    """Raise a ConfigError (file, line, element) for the first way `source` breaks the DTD."""
    root = source.root
    if root.tag != ROOT:
        raise source.error(root, f'the root element must be <{ROOT} version="1.0">')
    dtd = gateway_dtd()
    if dtd.validate(root.getroottree()):
        return
    for element in root.iter():
        if isinstance(element.tag, str):
            _check_attributes(source, element)
            _check_content(source, element)
    entry = dtd.error_log[0]            # a case the walk above does not know: libxml2's own words
    raise ConfigError(entry.message, source.path, entry.line)


# ------------------------------------------------------------------------------ attributes

def _attribute_name(decl: etree._DTDAttributeDecl) -> str:
    return f"{XML_NAMESPACE}{decl.name}" if decl.prefix == "xml" else decl.name


def _shown(name: str) -> str:
    return name.replace(XML_NAMESPACE, "xml:")


def _check_attributes(source: XmlFile, element: etree._Element) -> None:
    decl = _declarations().get(element.tag)
    if decl is None:
        return                          # reported by the parent's content check
    declared = {_attribute_name(a): a for a in decl.attributes()}
    for name, value in element.attrib.items():
        attribute = declared.get(name)
        if attribute is None:
            allowed = ", ".join(_shown(n) for n in declared)
            known = f"(allowed: {allowed})" if allowed else f"(<{element.tag}> takes no attributes)"
            raise source.error(element, f"unknown attribute '{_shown(name)}' {known}")
        if attribute.type == "enumeration" and value not in attribute.values():
            raise source.error(element, f"attribute '{_shown(name)}' must be "
                                        f"{' | '.join(attribute.values())}, got '{value}'")
    for name, attribute in declared.items():
        if attribute.default == "required" and name not in element.attrib:
            choices = f" ({' | '.join(attribute.values())})" if attribute.type == "enumeration" else ""
            raise source.error(element, f"missing required attribute '{_shown(name)}'{choices}")


# --------------------------------------------------------------------------------- content

def _check_content(source: XmlFile, element: etree._Element) -> None:
    decl = _declarations().get(element.tag)
    if decl is None:
        return
    kids = list(children(element))
    if decl.type == "empty":
        if kids:
            raise _at(source, kids[0], element, f"element '{kids[0].tag}' is not allowed here: "
                                                f"<{element.tag}> must be empty")
        if _has_text(element):
            raise source.error(element, f"<{element.tag}> must be empty (no text)")
    elif decl.type == "mixed":
        if kids:
            raise _at(source, kids[0], element, f"element '{kids[0].tag}' is not allowed here: "
                                                f"<{element.tag}> holds text only")
    elif decl.type == "element":
        if _has_text(element):
            raise source.error(element, f"text is not allowed in <{element.tag}>, only elements")
        _check_sequence(source, element, decl.content, kids)


def _has_text(element: etree._Element) -> bool:
    pieces = [element.text] + [child.tail for child in element]
    return any(piece and piece.strip() for piece in pieces)


def _at(source: XmlFile, child: etree._Element, parent: etree._Element, message: str) -> ConfigError:
    """An error on the child's line, named after the parent whose content it breaks."""
    path, line = source.where(child)
    return ConfigError(message, path, line, parent.tag)


def _check_sequence(source: XmlFile, element: etree._Element, model, kids: list) -> None:
    names = [kid.tag for kid in kids]
    tried: dict[int, list[str]] = {}
    ends = _ends(model, names, 0, tried)
    if len(names) in ends:
        return
    order = f"(expected order: {_render(model)})"
    furthest = max(set(tried) | ends)
    expected = list(dict.fromkeys(tried.get(furthest, [])))
    missing = [t for t in expected if _accepts(model, names[:furthest] + [t] + names[furthest:])]
    if missing:
        before = f" before <{names[furthest]}>" if furthest < len(names) else ""
        raise source.error(element, f"missing required element {_either(missing)}{before} {order}")
    if furthest == len(names):
        raise source.error(element, f"incomplete: expected {_either(expected)} {order}")
    message = _misplaced(element.tag, model, names, furthest, expected)
    raise _at(source, kids[furthest], element, f"{message} {order}")


def _misplaced(parent: str, model, names: list[str], index: int, expected: list[str]) -> str:
    name = names[index]
    allowed = list(_names(model))
    if name not in _declarations():
        close = difflib.get_close_matches(name, allowed, n=1)
        return f"unknown element '{name}'" + (f" (did you mean '{close[0]}'?)" if close else "")
    if name not in allowed:
        return f"element '{name}' is not allowed in <{parent}>"
    if name in names[:index]:
        return f"element '{name}' may appear only once here"
    later = [e for e in expected if e in names[index + 1:]]
    if later:
        return f"element '{name}' is not allowed here: <{later[0]}> must come before it"
    previous = names[index - 1] if index else None
    if previous in allowed and allowed.index(name) < allowed.index(previous):
        return f"element '{name}' is not allowed here: it must come before <{previous}>"
    return f"element '{name}' is not allowed here: expected {_either(expected)}"


def _either(names: list[str]) -> str:
    return " or ".join(f"<{n}>" for n in names) or "nothing more"


def _accepts(model, names: list[str]) -> bool:
    return len(names) in _ends(model, names, 0, {})


def _ends(node, names: list[str], start: int, tried: dict[int, list[str]]) -> set[int]:
    """Every position where matching `node` (with its occurrence) from `start` can end.

    `tried` collects, per position, the element names the model was ready for there; the largest
    position reached is where the children stop fitting.
    """
    def once(positions: set[int]) -> set[int]:
        found: set[int] = set()
        for position in positions:
            found |= _one(node, names, position, tried)
        return found

    if node.occur == "once":
        return once({start})
    if node.occur == "opt":
        return {start} | once({start})
    reached = set() if node.occur == "plus" else {start}
    frontier = once({start})
    while frontier - reached:
        fresh = frontier - reached
        reached |= fresh
        frontier = once(fresh)
    return reached


def _one(node, names: list[str], start: int, tried: dict[int, list[str]]) -> set[int]:
    if node.type == "element":
        tried.setdefault(start, []).append(node.name)
        return {start + 1} if start < len(names) and names[start] == node.name else set()
    if node.type == "seq":
        found: set[int] = set()
        for middle in _ends(node.left, names, start, tried):
            found |= _ends(node.right, names, middle, tried)
        return found
    if node.type == "or":
        return _ends(node.left, names, start, tried) | _ends(node.right, names, start, tried)
    return {start}                      # #PCDATA


def _names(node):
    """Element names of a content model in document order."""
    if node is None:
        return
    if node.type == "element":
        yield node.name
    yield from _names(node.left)
    yield from _names(node.right)


def _render(node, top: bool = True) -> str:
    """'name, domain-id, cost, ...' with choices as '(tcp | single-tcp)'."""
    if node.type == "element":
        return node.name
    if node.type == "seq":
        return f"{_render(node.left, False)}, {_render(node.right, node.right.type == 'seq')}"
    if node.type == "or":
        text = f"{_render(node.left, False)} | {_render(node.right, node.right.type == 'or')}"
        return text if top else f"({text})"
    return "#PCDATA"
