"""Read YAML safely, keeping where every node came from.

PyYAML's own home. Documents are composed into nodes (never constructed into arbitrary
objects), then converted to plain data while a ``SourceMap`` records the position of every
value and key by its path. Scalars follow the YAML 1.2 core schema: only ``true``/``false``
are booleans (``yes``, ``no``, ``on``, ``NO`` stay strings), and dates stay strings.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, Diagnostic
from .positions import Position, TextOrigin
from .textfile import read_text

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


def _build_loader_class() -> Any:
    import yaml

    # libyaml's parser keeps the same marks and is about 12x faster than the pure-Python one.
    base = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader

    class CoreSchemaLoader(base):  # type: ignore[misc,valid-type]
        """A safe loader with YAML 1.2 core-schema booleans and no implicit timestamps."""

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


class _Converter:
    def __init__(self, path: str, text: str, loader: Any) -> None:
        self.source = SourceMap(path, text)
        self.loader = loader
        self.diagnostics: list[Diagnostic] = []
        self.expanded = 0
        # Lists and mappings met so far, by id: one met twice came through an alias.
        self.collections: set[int] = set()
        self.aliased = False

    def error(self, pos: Position, message: str) -> None:
        self.diagnostics.append(Diagnostic(pos.path, pos.line, pos.col, message))

    def convert(self, node: Any, loc: Loc, active: frozenset[int] = frozenset()) -> Any:
        import yaml

        self.expanded += 1
        mark = node.start_mark
        if self.expanded > MAX_EXPANDED_NODES:
            raise _Stop(_pos(self.source.path, mark), self._too_large())
        if len(loc) > MAX_DEPTH:
            message = f"the document nests too deeply (more than {MAX_DEPTH} levels)"
            raise _Stop(_pos(self.source.path, mark), message)
        self.source.values.setdefault(loc, (mark.line + 1, mark.column + 1))
        if isinstance(node, yaml.ScalarNode):
            if node.tag == _STR:  # most values: no constructor needed
                if node.style:
                    self.source.styles[loc] = node.style
                return node.value
            try:
                return self.loader.construct_object(node, deep=True)
            except yaml.YAMLError as exc:
                pos = _pos(self.source.path, mark)
                self.error(pos, f"invalid value: {getattr(exc, 'problem', exc)}")
                return None
        pos = _pos(self.source.path, mark)
        if id(node) in active:
            self.error(pos, "this alias refers to a node that contains it (a cycle)")
            return None
        inner = active | {id(node)}
        if id(node) in self.collections:
            self.aliased = True
        self.collections.add(id(node))
        if node.tag not in ("tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"):
            self.error(pos, f"unsupported YAML tag {node.tag!r}; write plain lists and mappings")
            return None
        if isinstance(node, yaml.SequenceNode):
            return [self.convert(item, (*loc, i), inner) for i, item in enumerate(node.value)]
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, loc, inner)
        self.error(pos, f"unsupported YAML node {type(node).__name__}")
        return None

    def _mapping(self, node: Any, loc: Loc, active: frozenset[int]) -> dict[str, Any]:
        import yaml

        out: dict[str, Any] = {}
        keys = self.source.keys
        for key_node, value_node in node.value:
            mark = key_node.start_mark
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(
                key_node, yaml.ScalarNode
            ):
                what = (
                    "merge keys ('<<') are not supported; repeat the keys instead"
                    if key_node.tag == "tag:yaml.org,2002:merge"
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
            out[key] = self.convert(value_node, here, active)
        return out

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


def load_yaml_text(text: str, path: str) -> Iterator[LoadedYAML]:
    """Every document in ``text`` as plain data with its source map.

    Raises ``ConfigError`` with all problems found (syntax, duplicate keys, alias bombs).
    """
    import yaml

    loader = _loader_class()(text)
    docs: list[LoadedYAML] = []
    diagnostics: list[Diagnostic] = []
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
            diagnostics.extend(conv.diagnostics)
            docs.append(LoadedYAML(data, conv.source))
    except yaml.YAMLError as exc:
        diagnostics.append(_yaml_error_diagnostic(path, exc, text))
    finally:
        loader.dispose()
    if diagnostics:
        raise ConfigError(diagnostics)
    yield from docs


def load_yaml_file(path: Path, *, display: str | None = None) -> LoadedYAML:
    """The single YAML document in ``path``."""
    shown = display or str(path)
    text = read_text(path, shown)
    docs = list(load_yaml_text(text, shown))
    if not docs:
        raise ConfigError(Diagnostic(shown, 1, 1, _no_document(text)))
    if len(docs) > 1:
        raise ConfigError(
            Diagnostic(shown, 1, 1, "the file holds several YAML documents; keep one per file")
        )
    return docs[0]


def _no_document(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "the file is empty; start with 'version: 1'"
    if all(line.startswith("#") for line in lines):
        return "the file holds only comments, no YAML document; start with 'version: 1'"
    return "the file holds no YAML document; start with 'version: 1'"
