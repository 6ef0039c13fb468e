"""Read YAML safely, keeping where every node came from.

PyYAML's own home. Documents are composed into nodes (never constructed into arbitrary
objects), then converted to plain data while a ``SourceMap`` records the position of every
value and key by its path. Scalars follow the YAML 1.2 core schema: only ``true``/``false``
are booleans (``yes``, ``no``, ``on``, ``NO`` stay strings), and dates stay strings.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, Diagnostic
from .positions import Position, TextOrigin
from .textfile import read_stamped_text

__all__ = ["LoadedYAML", "Loc", "SourceMap", "load_yaml_file", "load_yaml_text"]

Loc = tuple[str | int, ...]

#: Aliases may repeat a node, but the expanded document stays bounded (no alias bombs).
MAX_EXPANDED_NODES = 100_000
#: Lists and mappings nest at most this deep: everything downstream (env expansion, schema
#: bundling, JSON Schema checks) walks documents recursively, within Python's stack.
MAX_DEPTH = 100


@dataclass(slots=True)
class SourceMap:
    """Where a document's values (``values``) and mapping keys (``keys``) are, by path.

    Positions are kept as (line, column) pairs and made into ``Position``s only when asked
    for: a repository has tens of thousands of nodes and few problems.
    """

    path: str
    text: str = ""
    values: dict[Loc, tuple[int, int]] = field(default_factory=dict)
    keys: dict[Loc, tuple[int, int]] = field(default_factory=dict)
    #: The YAML style of string scalars that are not plain ("'", '"', "|", ">").
    styles: dict[Loc, str] = field(default_factory=dict)
    #: The file's modification time (ns) and size as ``text`` was read from it; None for a
    #: text that was not read from a file.
    stamp: tuple[int, int] | None = None

    def at(self, loc: Loc, *, key: bool = False) -> Position:
        """The best-known position for ``loc``: the node itself, else its nearest parent."""
        table = self.keys if key else self.values
        probe = tuple(loc)
        while True:
            if probe in table:
                return Position(self.path, *table[probe])
            if key and probe in self.values:
                return Position(self.path, *self.values[probe])
            if not probe:
                return Position(self.path, 1, 1)
            probe = probe[:-1]
            table = self.values

    def origin(self, loc: Loc) -> TextOrigin:
        """Where the string at ``loc`` starts and how it was written (for templates)."""
        pos = self.at(loc)
        style = self.styles.get(tuple(loc), "")
        if style not in ("|", ">"):
            return TextOrigin(pos.path, pos.line, pos.col, style=style)
        # Block content starts on the line after the indicator; find its indentation.
        indent = 0
        for raw in self.text.splitlines()[pos.line :]:
            if raw.strip():
                indent = len(raw) - len(raw.lstrip(" "))
                break
        return TextOrigin(pos.path, pos.line, pos.col, style, indent)


@dataclass(slots=True)
class LoadedYAML:
    """A YAML file's data, and where in the file each value came from."""

    data: Any
    source: SourceMap
    #: Problems that left the data readable (a duplicate key, a key with no value, a value
    #: that is not valid): the key was dropped or the value is ``None``. Only a reader that
    #: asks for them (``partial=True``) gets a document that has any.
    problems: list[Diagnostic] = field(default_factory=list)


def _build_loader_class() -> Any:
    import yaml

    # libyaml's parser keeps the same marks and is about 12x faster than the pure-Python one.
    base = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader

    scalar, sequence = yaml.ScalarNode, yaml.SequenceNode
    # The tag of each plain scalar met so far: a repository repeats the same keys and values
    # in every file, and resolving one tries up to ten regular expressions. Short ones only.
    resolved: dict[str, str] = {}

    class CoreSchemaLoader(base):  # type: ignore[misc,valid-type]
        """A safe loader with YAML 1.2 core-schema booleans and no implicit timestamps."""

        # No path resolvers are ever added, so the parser's calls for each node need not
        # look for them.
        def descend_resolver(self, current_node: Any, current_index: Any) -> None:
            return None

        def ascend_resolver(self) -> None:
            return None

        def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
            if kind is scalar:
                if not implicit[0]:
                    return _STR
                tag = resolved.get(value)
                if tag is None:
                    tag = super().resolve(kind, value, implicit)
                    if len(value) <= 64 and len(resolved) < 10_000:
                        resolved[value] = tag
                return tag
            return _SEQ if kind is sequence else _MAP

    resolvers: dict[str, list[Any]] = {}
    for first, entries in yaml.SafeLoader.yaml_implicit_resolvers.items():
        resolvers[first] = [
            (tag, regexp)
            for tag, regexp in entries
            if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:timestamp")
        ]
    CoreSchemaLoader.yaml_implicit_resolvers = resolvers
    CoreSchemaLoader.add_implicit_resolver(
        "tag:yaml.org,2002:bool",
        re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
        list("tTfF"),
    )
    return CoreSchemaLoader


_LOADER: Any = None


def _loader_class() -> Any:
    global _LOADER
    if _LOADER is None:
        _LOADER = _build_loader_class()
    return _LOADER


def _pos(path: str, mark: Any) -> Position:
    return Position(path, mark.line + 1, mark.column + 1)


_STR = "tag:yaml.org,2002:str"
_SEQ = "tag:yaml.org,2002:seq"
_MAP = "tag:yaml.org,2002:map"
_MERGE = "tag:yaml.org,2002:merge"
_NULL = "tag:yaml.org,2002:null"


def _quoted(text: str) -> str:
    """``text`` as a double-quoted YAML scalar."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


class _Converter:
    def __init__(self, path: str, text: str, loader: Any) -> None:
        import yaml

        self.source = SourceMap(path, text)
        self.loader = loader
        self.diagnostics: list[Diagnostic] = []
        self.expanded = 0
        # Lists and mappings met so far, by id: one met twice came through an alias.
        self.collections: set[int] = set()
        # The lists and mappings being converted, outermost first (an alias to one is a
        # cycle); a set kept as a stack, not a frozenset copied at every level.
        self.active: set[int] = set()
        self.aliased = False
        self.yaml_error = yaml.YAMLError
        self.scalar = yaml.ScalarNode
        self.sequence = yaml.SequenceNode
        self.mapping = yaml.MappingNode

    def error(self, pos: Position, message: str) -> None:
        self.diagnostics.append(Diagnostic(pos.path, pos.line, pos.col, message))

    def convert(self, node: Any, loc: Loc) -> Any:
        # The hot path of every compile: one call per value of every file read.
        self.expanded += 1
        mark = node.start_mark
        if self.expanded > MAX_EXPANDED_NODES:
            raise _Stop(_pos(self.source.path, mark), self._too_large())
        if len(loc) > MAX_DEPTH:
            message = f"the document nests too deeply (more than {MAX_DEPTH} levels)"
            raise _Stop(_pos(self.source.path, mark), message)
        values = self.source.values
        if loc not in values:
            values[loc] = (mark.line + 1, mark.column + 1)
        tag = node.tag
        kind = type(node)
        if kind is self.scalar or isinstance(node, self.scalar):
            if tag == _STR:  # most values: no constructor needed
                if node.style:
                    self.source.styles[loc] = node.style
                return node.value
            try:
                return self.loader.construct_object(node, deep=True)
            except self.yaml_error as exc:
                pos = _pos(self.source.path, mark)
                self.error(pos, f"invalid value: {getattr(exc, 'problem', exc)}")
                return None
            except (ValueError, KeyError, AttributeError, TypeError) as exc:
                # PyYAML's constructors raise these on text an explicit tag cannot hold
                # (``!!bool maybe``: KeyError, ``!!timestamp x``: AttributeError, ``!!float
                # x``: ValueError), and int() on more digits than it converts.
                pos = _pos(self.source.path, mark)
                digits = sys.get_int_max_str_digits()
                if isinstance(exc, ValueError) and f"({digits} digits)" in str(exc):
                    self.error(pos, f"invalid value: a number of more than {digits:,} digits")
                else:
                    shown = tag.replace("tag:yaml.org,2002:", "!!")
                    self.error(pos, f"invalid value: {node.value!r} is not a valid {shown}")
                return None
        key = id(node)
        if key in self.active:
            message = "this alias refers to a node that contains it (a cycle)"
            self.error(_pos(self.source.path, mark), message)
            return None
        if key in self.collections:
            self.aliased = True
        self.collections.add(key)
        if tag != _SEQ and tag != _MAP:
            message = f"unsupported YAML tag {tag!r}; write plain lists and mappings"
            self.error(_pos(self.source.path, mark), message)
            return None
        self.active.add(key)
        try:
            if kind is self.sequence or isinstance(node, self.sequence):
                convert = self.convert
                return [convert(item, (*loc, i)) for i, item in enumerate(node.value)]
            if kind is self.mapping or isinstance(node, self.mapping):
                return self._mapping(node, loc)
        finally:
            self.active.discard(key)
        self.error(_pos(self.source.path, mark), f"unsupported YAML node {kind.__name__}")
        return None

    def _mapping(self, node: Any, loc: Loc) -> dict[str, Any]:
        out: dict[str, Any] = {}
        keys = self.source.keys
        scalar = self.scalar
        flow = node.flow_style
        previous: Any = None
        for key_node, value_node in node.value:
            if flow and self._comma_split(previous, key_node, value_node):
                previous = value_node
                continue
            previous = value_node
            mark = key_node.start_mark
            if key_node.tag == _MERGE or not isinstance(key_node, scalar):
                what = (
                    "merge keys ('<<') are not supported; repeat the keys instead"
                    if key_node.tag == _MERGE
                    else "mapping keys must be plain strings"
                )
                self.error(_pos(self.source.path, mark), what)
                continue
            key = str(key_node.value)
            here = (*loc, key)
            if key in out:
                first = keys.get(here)
                where = f" (first at line {first[0]})" if first else ""
                message = f"duplicate key '{key}'{where}; remove one of them"
                self.error(_pos(self.source.path, mark), message)
                continue
            keys[here] = (mark.line + 1, mark.column + 1)
            out[key] = self.convert(value_node, here)
        return out

    def _comma_split(self, previous: Any, key_node: Any, value_node: Any) -> bool:
        """Whether a ``{...}`` entry is a key with no ``:`` and no value, which is what
        unquoted text with a comma in it becomes (``{name: Acme, Inc}``: ``Inc`` is a key);
        if so it is reported, with the text quoted as it was meant."""
        if not (
            value_node.tag == _NULL
            and value_node.value == ""
            and isinstance(key_node, self.scalar)
            and not key_node.style
        ):
            return False
        text = self.source.text
        after = key_node.end_mark.index
        while after < len(text) and text[after] in " \t\r\n":
            after += 1
        if after < len(text) and text[after] == ":":
            return False  # ``{a: }``: written with no value on purpose
        key = str(key_node.value)
        meant = ""
        if isinstance(previous, self.scalar) and not previous.style and previous.value:
            meant = text[previous.start_mark.index : key_node.end_mark.index]
        message = (
            f"'{key}' has no value: in a {{...}} mapping a comma ends unquoted text, and what "
            "follows becomes a key; put text holding a comma in quotes"
        )
        if meant and "\n" not in meant:
            message += f" ({_quoted(meant)})"
        self.error(_pos(self.source.path, key_node.start_mark), message)
        return True

    def _too_large(self) -> str:
        if self.aliased:
            return (
                f"the document expands to more than {MAX_EXPANDED_NODES:,} nodes through "
                "aliases; use fewer aliases"
            )
        return (
            f"the document holds more than {MAX_EXPANDED_NODES:,} values, the limit for one "
            "file; split it into smaller files"
        )


class _Stop(Exception):
    """A problem that ends reading the document (it is too large or too deep)."""

    def __init__(self, pos: Position, message: str) -> None:
        self.pos = pos
        self.message = message


def _yaml_error_diagnostic(path: str, exc: Exception, text: str = "") -> Diagnostic:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    message = f"invalid YAML: {problem}"
    if context:
        message += f" ({context})"
    index = getattr(mark, "index", None)
    at_tab = isinstance(index, int) and 0 <= index < len(text) and text[index] == "\t"
    # "\btab": "unacceptable character" is no hint about tabs.
    if at_tab or "\t" in problem or re.search(r"\btab", str(problem)):
        message += "; indent with spaces, not tabs"
    line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    position = getattr(exc, "position", None)  # the reader's errors carry an index only
    if mark is None and isinstance(position, int) and 0 <= position < len(text):
        line = text.count("\n", 0, position) + 1
        col = position - text.rfind("\n", 0, position)
        message = f"invalid YAML: character {text[position]!r} is not allowed in YAML text"
    return Diagnostic(path, line, col, message)


def load_yaml_text(text: str, path: str, *, partial: bool = False) -> Iterator[LoadedYAML]:
    """Every document in ``text`` as plain data with its source map.

    Raises ``ConfigError`` with all problems found (syntax, duplicate keys, alias bombs).
    With ``partial``, problems that leave a document readable are kept in its ``problems``
    instead, so the reader can go on checking the rest of the file and report every problem
    in one run; a syntax error, or a document too large or too deep, still raises.
    """
    import yaml

    loader = _loader_class()(text)
    docs: list[LoadedYAML] = []
    diagnostics: list[Diagnostic] = []
    readable: list[Diagnostic] = []  # problems of documents read whole (``partial``)
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            conv = _Converter(path, text, loader)
            try:
                data = conv.convert(node, ())
            except _Stop as stop:
                diagnostics.append(Diagnostic(path, stop.pos.line, stop.pos.col, stop.message))
                break
            readable.extend(conv.diagnostics)
            docs.append(LoadedYAML(data, conv.source, conv.diagnostics))
    except yaml.YAMLError as exc:
        diagnostics.append(_yaml_error_diagnostic(path, exc, text))
    finally:
        loader.dispose()
    if diagnostics or (readable and not partial):
        raise ConfigError([*readable, *diagnostics])
    yield from docs


def load_yaml_file(path: Path, *, display: str | None = None, partial: bool = False) -> LoadedYAML:
    """The single YAML document in ``path`` (``partial``: as ``load_yaml_text`` says)."""
    shown = display or str(path)
    text, stamp = read_stamped_text(path, shown)
    docs = list(load_yaml_text(text, shown, partial=partial))
    if not docs:
        raise ConfigError(Diagnostic(shown, 1, 1, _no_document(text)))
    if len(docs) > 1:
        raise ConfigError(
            Diagnostic(shown, 1, 1, "the file holds several YAML documents; keep one per file")
        )
    docs[0].source.stamp = stamp
    return docs[0]


def _no_document(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "the file is empty; start with 'version: 1'"
    if all(line.startswith("#") for line in lines):
        return "the file holds only comments, no YAML document; start with 'version: 1'"
    return "the file holds no YAML document; start with 'version: 1'"
