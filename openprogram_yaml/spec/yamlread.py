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

__all__ = ["LoadedYAML", "Loc", "SourceMap", "load_yaml_file", "load_yaml_text"]

Loc = tuple[str | int, ...]

#: Aliases may repeat a node, but the expanded document stays bounded (no alias bombs).
MAX_EXPANDED_NODES = 100_000


@dataclass(slots=True)
class SourceMap:
    """Positions of a document's values (``values``) and mapping keys (``keys``) by path."""

    path: str
    text: str = ""
    values: dict[Loc, Position] = field(default_factory=dict)
    keys: dict[Loc, Position] = field(default_factory=dict)
    origins: dict[Loc, TextOrigin] = field(default_factory=dict)

    def at(self, loc: Loc, *, key: bool = False) -> Position:
        """The best-known position for ``loc``: the node itself, else its nearest parent."""
        table = self.keys if key else self.values
        probe = tuple(loc)
        while True:
            if probe in table:
                return table[probe]
            if key and probe in self.values:
                return self.values[probe]
            if not probe:
                return Position(self.path, 1, 1)
            probe = probe[:-1]
            table = self.values

    def origin(self, loc: Loc) -> TextOrigin:
        """Where the string at ``loc`` starts and how it was written (for templates)."""
        found = self.origins.get(tuple(loc))
        if found is not None:
            return found
        pos = self.at(loc)
        return TextOrigin(pos.path, pos.line, pos.col, style="")


@dataclass(slots=True)
class LoadedYAML:
    data: Any
    source: SourceMap


def _build_loader_class() -> Any:
    import yaml

    class CoreSchemaLoader(yaml.SafeLoader):
        """SafeLoader with YAML 1.2 core-schema booleans and no implicit timestamps."""

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


class _Converter:
    def __init__(self, path: str, text: str, loader: Any) -> None:
        self.source = SourceMap(path, text)
        self.loader = loader
        self.diagnostics: list[Diagnostic] = []
        self.expanded = 0
        self._lines = text.splitlines()

    def error(self, pos: Position, message: str) -> None:
        self.diagnostics.append(Diagnostic(pos.path, pos.line, pos.col, message))

    def convert(self, node: Any, loc: Loc, active: frozenset[int] = frozenset()) -> Any:
        import yaml

        self.expanded += 1
        if self.expanded > MAX_EXPANDED_NODES:
            raise _TooLarge(_pos(self.source.path, node.start_mark))
        pos = _pos(self.source.path, node.start_mark)
        self.source.values.setdefault(loc, pos)
        if isinstance(node, yaml.ScalarNode):
            self._record_origin(node, loc, pos)
            try:
                return self.loader.construct_object(node, deep=True)
            except yaml.YAMLError as exc:
                self.error(pos, f"invalid value: {getattr(exc, 'problem', exc)}")
                return None
        if id(node) in active:
            self.error(pos, "this alias refers to a node that contains it (a cycle)")
            return None
        inner = active | {id(node)}
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
        for key_node, value_node in node.value:
            kpos = _pos(self.source.path, key_node.start_mark)
            if key_node.tag == "tag:yaml.org,2002:merge":
                self.error(kpos, "merge keys ('<<') are not supported; repeat the keys instead")
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                self.error(kpos, "mapping keys must be plain strings")
                continue
            key = str(key_node.value)
            if key in out:
                first = self.source.keys.get((*loc, key))
                where = f" (first at line {first.line})" if first else ""
                self.error(kpos, f"duplicate key '{key}'{where}; remove one of them")
                continue
            self.source.keys[(*loc, key)] = kpos
            out[key] = self.convert(value_node, (*loc, key), active)
        return out

    def _record_origin(self, node: Any, loc: Loc, pos: Position) -> None:
        style = node.style or ""
        if style not in ("|", ">"):
            self.source.origins[loc] = TextOrigin(pos.path, pos.line, pos.col, style=style)
            return
        # Block content starts on the line after the indicator; find its indentation.
        indent = 0
        for raw in self._lines[pos.line :]:
            if raw.strip():
                indent = len(raw) - len(raw.lstrip(" "))
                break
        self.source.origins[loc] = TextOrigin(pos.path, pos.line, pos.col, style, indent)


class _TooLarge(Exception):
    def __init__(self, pos: Position) -> None:
        self.pos = pos


def _yaml_error_diagnostic(path: str, exc: Exception) -> Diagnostic:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    message = f"invalid YAML: {problem}"
    if context:
        message += f" ({context})"
    if "\t" in problem or "tab" in str(problem):
        message += "; indent with spaces, not tabs"
    line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
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
            except _TooLarge as big:
                diagnostics.append(
                    Diagnostic(
                        path,
                        big.pos.line,
                        big.pos.col,
                        f"the document expands to more than {MAX_EXPANDED_NODES:,} nodes "
                        "through aliases; use fewer aliases",
                    )
                )
                break
            diagnostics.extend(conv.diagnostics)
            docs.append(LoadedYAML(data, conv.source))
    except yaml.YAMLError as exc:
        diagnostics.append(_yaml_error_diagnostic(path, exc))
    finally:
        loader.dispose()
    if diagnostics:
        raise ConfigError(diagnostics)
    yield from docs


def load_yaml_file(path: Path, *, display: str | None = None) -> LoadedYAML:
    """The single YAML document in ``path``."""
    shown = display or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(Diagnostic(shown, 0, 0, "file not found")) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(Diagnostic(shown, 0, 0, f"cannot read file: {exc}")) from None
    docs = list(load_yaml_text(text, shown))
    if not docs:
        raise ConfigError(Diagnostic(shown, 1, 1, "the file is empty; start with 'version: 1'"))
    if len(docs) > 1:
        raise ConfigError(
            Diagnostic(shown, 1, 1, "the file holds several YAML documents; keep one per file")
        )
    return docs[0]
