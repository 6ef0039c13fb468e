"""Response and input schemas from config: bundle file ``$ref``s, check, and position errors.

A schema may point at files (``{$ref: ../schemas/label.json}``); those are read (JSON or
YAML), checked to stay inside the project, and inlined, so the schema that reaches a provider
is self-contained. ``$defs`` of a referenced file are hoisted under a name prefixed with the
file's path in the project (``a/label.json``'s ``kind`` becomes ``a_label__kind``), so files
of the same name in different folders keep their definitions apart. Remote references are
refused.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._file_reads import file_stamp
from ..errors import Diagnostic
from ..runtime.validation import keyword_mistakes, schema_issues
from ..spec.positions import Position
from ..spec.textfile import UnreadableFile, read_text
from ..spec.yamlread import MAX_DEPTH, Loc, SourceMap, load_yaml_text
from .paths import LINK, Resolutions, entry_kind

__all__ = ["ENVELOPE_KEYS", "SchemaBundle", "SchemaFiles", "bundle_schema", "split_envelope"]

#: Keys of the structured-output envelope (anything else means a bare schema).
ENVELOPE_KEYS = frozenset(
    {"schema", "name", "description", "strict", "fallback", "max_validation_retries"}
)
_FALLBACKS = ("auto", "none", "prompt")


@dataclass(slots=True)
class SchemaBundle:
    """A self-contained schema plus the files it was built from."""

    schema: Any
    files: set[Path] = field(default_factory=set)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    #: Every path a ``$ref`` was looked up at, with what was there (``paths.entry_kind``).
    lookups: dict[str, str] = field(default_factory=dict)


def split_envelope(value: Any) -> tuple[Any, dict[str, Any], bool]:
    """``(schema, envelope options, is_envelope)`` for a response_schema value."""
    if (
        isinstance(value, dict)
        and "schema" in value
        and set(value) <= ENVELOPE_KEYS | {"type"}
        # A bare schema describing an object property called "schema" has "type" too; the
        # seed's envelope says "type: json_schema", which no bare schema can.
        and value.get("type", "json_schema") == "json_schema"
    ):
        options = {k: v for k, v in value.items() if k not in ("schema", "type")}
        return value["schema"], options, True
    return value, {}, False


def envelope_problems(options: dict[str, Any]) -> list[tuple[str, str]]:
    """Problems with envelope options, as ``(key, message)``."""
    problems = []
    if "fallback" in options and options["fallback"] not in _FALLBACKS:
        problems.append(("fallback", f"fallback must be one of {', '.join(_FALLBACKS)}"))
    mvr = options.get("max_validation_retries")
    if mvr is not None and (not isinstance(mvr, int) or isinstance(mvr, bool) or not 0 <= mvr <= 2):
        problems.append(("max_validation_retries", "max_validation_retries must be 0, 1 or 2"))
    if "strict" in options and not isinstance(options["strict"], bool):
        problems.append(("strict", "strict must be true or false"))
    if "name" in options and not (
        isinstance(options["name"], str) and re.fullmatch(r"[A-Za-z0-9_-]{1,64}", options["name"])
    ):
        problems.append(("name", "name must be 1-64 letters, digits, '_' or '-'"))
    return problems


class SchemaFiles:
    """Schema files parsed and checked during one compile, shared by the agents it compiles
    (a repository's agents point at the same few files). Each agent's bundle still records
    the file as read, and repeats the file's own problems.

    Schemas bundled without a problem are shared too, by their text and the folder of the
    file naming them (what a ``$ref`` is relative to): agents repeat the same inline
    schemas (``{type: string}``, one ``$ref`` to a shared file). Each gets its own copy
    (``_copied``), with the files and lookups of the first; a schema with a problem is
    bundled each time, as its messages name the place that wrote it.

    A file, and a bundle built from files, is used again only while each file's stamp
    (mtime and size, taken before it was read) holds: a file replaced during the compile by
    one with an older stamp (rsync -a, cp -p, tar) is read again, as an agent's read-set,
    taken from the file as it is after the agent compiled, vouches for what it holds then.
    """

    def __init__(self) -> None:
        #: Path -> (data, source map, the file's own problems, stamp as read).
        self.loaded: dict[
            Path, tuple[Any, SourceMap | None, tuple[Diagnostic, ...], tuple[int, int]]
        ] = {}
        #: Each file's path in the project made a name (``_Bundler.prefix``).
        self.names: dict[Path, str] = {}
        #: ``_sharing_key`` -> (bundled, files with their stamps as read, lookups).
        self.bundled: dict[
            tuple[str, str], tuple[Any, tuple[tuple[Path, tuple[int, int]], ...], dict[str, str]]
        ] = {}


#: At most this many mappings and lists in one bundled schema. Files referenced again and
#: again through files that reference them twice (``a`` -> ``b`` twice -> ``c`` twice …)
#: grow a copy per path: 30 files of two lines each make 2**30.
MAX_BUNDLED_VALUES = 100_000


class _Bundler:
    def __init__(
        self,
        root: Path,
        search: Sequence[Path] = (),
        shared: SchemaFiles | None = None,
        resolutions: Resolutions | None = None,
    ) -> None:
        self.root = root
        self.search = tuple(search)
        self.shared = shared if shared is not None else SchemaFiles()
        self.resolutions = resolutions if resolutions is not None else Resolutions()
        self.out = SchemaBundle(None)
        self.hoisted: dict[str, Any] = {}
        self._cache: dict[Path, Any] = {}
        self._prefixes: dict[Path, str] = {}
        #: The stamp of each file read, as it was before reading (``SchemaFiles``).
        self.stamps: dict[Path, tuple[int, int]] = {}
        #: Mappings and lists built so far; past ``MAX_BUNDLED_VALUES`` nothing more is.
        self.built = 0

    @property
    def too_large(self) -> bool:
        return self.built > MAX_BUNDLED_VALUES

    def error(self, pos: Position, message: str) -> None:
        self.out.diagnostics.append(Diagnostic(pos.path, pos.line, pos.col, message))

    def load(self, path: Path, pos: Position) -> tuple[Any, SourceMap | None]:
        if path in self._cache:
            return self._cache[path], None
        stamp = file_stamp(path)
        shared = self.shared.loaded.get(path)
        if shared is not None and stamp is not None and shared[3] == stamp:
            self.stamps[path] = stamp
            self.out.files.add(path)
            self.out.diagnostics.extend(shared[2])
            self._cache[path] = shared[0]
            return shared[0], shared[1]
        before = len(self.out.diagnostics)
        try:
            text = read_text(path)
        except UnreadableFile as exc:
            if exc.inside:
                self.out.files.add(path)
                self.out.diagnostics.extend(exc.diagnostics)
            else:
                self.error(pos, f"cannot read schema file {path.name}: {exc.reason}")
            return None, None
        self.out.files.add(path)
        source: SourceMap | None = None
        try:
            if path.suffix == ".json":
                data = json.loads(text)
                if _nests_deeper(data, MAX_DEPTH):
                    raise RecursionError  # reported with the place, below
            else:
                docs = list(load_yaml_text(text, str(path)))
                data = docs[0].data if docs else None
                source = docs[0].source if docs else None
        except json.JSONDecodeError as exc:
            self.error(Position(str(path), exc.lineno, exc.colno), f"invalid JSON: {exc.msg}")
            return None, None
        except RecursionError:
            message = f"the schema nests too deeply (more than {MAX_DEPTH} levels)"
            self.error(Position(str(path), *_json_depth_position(text)), message)
            return None, None
        except ValueError as exc:
            if path.suffix == ".json":  # int()'s limit on digits (sys.get_int_max_str_digits)
                message = "invalid JSON: a number has more digits than the JSON decoder reads"
                self.error(Position(str(path), 1, 1), message)
            else:
                self.error(pos, f"cannot parse schema file {path.name}: {exc}")
            return None, None
        except Exception as exc:  # ConfigError from YAML: report its first diagnostic here
            diags = getattr(exc, "diagnostics", None)
            if diags:
                self.out.diagnostics.extend(diags)
            else:
                self.error(pos, f"cannot parse schema file {path.name}: {exc}")
            return None, None
        # Checked here, once per file: bundling leaves no positions inside referenced files.
        for sub, message in keyword_mistakes(data):
            self.error(source.at(sub, key=True) if source else Position(str(path), 1, 1), message)
        self._cache[path] = data
        if stamp is not None:
            self.stamps[path] = stamp
            # Only a file that parsed is shared: the other messages name the referring place.
            self.shared.loaded[path] = (data, source, tuple(self.out.diagnostics[before:]), stamp)
        return data, source

    def prefix(self, path: Path) -> str:
        """The prefix of the ``$defs`` hoisted from ``path``: its path in the project, made a
        name, and unique in this bundle (``a/b_c.json`` and ``a_b/c.json`` read alike)."""
        found = self._prefixes.get(path)
        if found is None:
            base = self.shared.names.get(path)
            if base is None:
                where = path.relative_to(self.root) if path.is_relative_to(self.root) else path
                base = re.sub(r"[^A-Za-z0-9_]", "_", where.with_suffix("").as_posix())
                self.shared.names[path] = base
            taken = set(self._prefixes.values())
            found, n = f"{base}__", 2
            while found in taken:
                found, n = f"{base}_{n}__", n + 1
            self._prefixes[path] = found
        return found

    def kind(self, path: Path) -> str:
        """What is at ``path`` (``paths.entry_kind``), recorded: a file appearing there
        later changes what a ``$ref`` resolves to."""
        found = self.out.lookups[str(path)] = entry_kind(path)
        return found

    def find_in_schema_folders(self, name: str) -> Path | None:
        for folder in self.search:
            named = folder / name
            candidate = named.resolve()
            if self.kind(candidate) == "file" and candidate.is_relative_to(self.root):
                if str(candidate) != os.path.normpath(named):  # through a link: see LINK
                    self.out.lookups[str(named)] = LINK + str(candidate)
                return candidate
        return None

    def walk(
        self,
        node: Any,
        base: Path,
        where: Callable[[Loc], Position],
        loc: Loc,
        stack: tuple[Path, ...],
        prefix: str,
    ) -> Any:
        if isinstance(node, (dict, list)):
            self.built += 1
            if self.too_large:
                return None  # said once, at the outermost $ref (``ref``) or the schema
        if isinstance(node, list):
            return [
                self.walk(v, base, where, (*loc, i), stack, prefix)
                if isinstance(v, (dict, list))
                else v
                for i, v in enumerate(node)
            ]
        if not isinstance(node, dict):
            return node
        out: dict[str, Any] = {}
        for key, value in node.items():
            if not isinstance(value, (dict, list)) and key != "$ref":
                out[key] = value  # most values: a type name, a description, a bound
                continue
            if key == "$ref" and isinstance(value, str):
                replaced = self.ref(value, base, where, (*loc, key), stack, prefix)
                if isinstance(replaced, dict) and len(node) == 1:
                    return replaced
                if isinstance(replaced, dict) and "$ref" not in replaced:
                    # Sibling keywords next to $ref: keep both through allOf.
                    out.setdefault("allOf", []).append(replaced)
                    continue
                out[key] = replaced["$ref"] if isinstance(replaced, dict) else value
                continue
            if key == "$defs" and prefix and isinstance(value, dict):
                for name, sub in value.items():
                    self.hoisted[f"{prefix}{name}"] = self.walk(
                        sub, base, where, (*loc, key, name), stack, prefix
                    )
                continue
            out[key] = self.walk(value, base, where, (*loc, key), stack, prefix)
        return out

    def ref(
        self,
        ref: str,
        base: Path,
        where: Callable[[Loc], Position],
        loc: Loc,
        stack: tuple[Path, ...],
        prefix: str,
    ) -> Any:
        if self.too_large:
            return None
        pos = where(loc)
        if ref.startswith("#"):
            if prefix and ref.startswith("#/$defs/"):
                return {"$ref": f"#/$defs/{prefix}{ref[len('#/$defs/') :]}"}
            if prefix and ref != "#":
                self.error(
                    pos,
                    f"'{ref}': a referenced schema file may point inside itself "
                    "only through '#/$defs/NAME'",
                )
            return {"$ref": ref}
        file_part, _, pointer = ref.partition("#")
        target, problem = self.resolutions.resolve_inside(
            base, file_part, self.root, self.out.lookups
        )
        if target is None:
            self.error(pos, f"$ref {problem}")
            return None
        if target in stack:
            chain = " -> ".join(p.name for p in (*stack, target))
            self.error(pos, f"$ref cycle between schema files: {chain}; use $defs for recursion")
            return None
        kind = self.kind(target)
        if kind not in ("", "file"):
            self.error(pos, f"$ref '{ref}': {target} is not a regular file")
            return None
        if kind != "file":
            found = self.find_in_schema_folders(file_part)
            if found is None:
                folders = ", ".join(str(p) for p in self.search)
                also = f" (nor in the schema folders {folders})" if self.search else ""
                self.error(pos, f"$ref '{ref}': no such file {target}{also}")
                return None
            target = found
        data, source = self.load(target, pos)
        if data is None:
            return None

        def inner(sub: Loc) -> Position:
            return source.at(sub) if source else Position(str(target), 1, 1)

        data = self.walk(data, target, inner, (), (*stack, target), self.prefix(target))
        if self.too_large:
            if not stack:
                self.error(pos, f"$ref '{ref}': {_TOO_LARGE}")
            return None
        if pointer:
            found = _pointed(data, pointer)
            if found is _NOWHERE:
                self.error(pos, f"$ref '{ref}': '{pointer}' is not in {target.name}")
                return None
            return found
        return data


def bundle_schema(
    schema: Any,
    *,
    base_file: Path,
    root: Path,
    source: SourceMap,
    loc: Loc,
    search: Sequence[Path] = (),
    shared: SchemaFiles | None = None,
    resolutions: Resolutions | None = None,
    stamp: Callable[[Path], tuple[int, int] | None] = file_stamp,
) -> SchemaBundle:
    """Inline file references in ``schema`` and check it is a valid JSON Schema.

    A ``$ref`` is relative to the file naming it; one not found there is looked up in the
    ``search`` folders (the project's schema folders). ``shared`` holds the files already
    parsed in this compile, ``resolutions`` the paths already resolved. ``stamp`` looks at
    a file a kept bundle read (``Collector.stamp``: once an agent).
    """
    key = _sharing_key(schema, base_file) if shared is not None else None
    known = shared.bundled.get(key) if shared is not None and key is not None else None
    if known is not None and all(stamp(path) == seen for path, seen in known[1]):
        files = {path for path, _ in known[1]}
        return SchemaBundle(_copied(known[0]), files, [], dict(known[2]))
    bundler = _Bundler(root, search, shared, resolutions)
    for path, message in keyword_mistakes(schema):
        pos = source.at((*loc, *path), key=True)
        bundler.out.diagnostics.append(Diagnostic(pos.path, pos.line, pos.col, message))
    bundled = bundler.walk(schema, base_file, lambda sub: source.at(sub), loc, (), "")
    if bundler.too_large and not bundler.out.diagnostics:
        pos = source.at(loc)
        bundler.error(pos, f"the schema {_TOO_LARGE}")
    if bundler.hoisted and isinstance(bundled, dict):
        defs = dict(bundled.get("$defs", {}))
        defs.update(bundler.hoisted)
        bundled["$defs"] = defs
    out = bundler.out
    out.schema = bundled
    if not out.diagnostics:
        for path, message in schema_issues(bundled):
            pos = source.at((*loc, *path))
            out.diagnostics.append(
                Diagnostic(pos.path, pos.line, pos.col, f"invalid JSON Schema: {message}")
            )
    if (
        key is not None
        and shared is not None
        and not out.diagnostics
        and out.files <= bundler.stamps.keys()
    ):
        stamps = tuple((path, bundler.stamps[path]) for path in out.files)
        shared.bundled[key] = (_copied(bundled), stamps, dict(out.lookups))
    return out


_TOO_LARGE = (
    f"would hold more than {MAX_BUNDLED_VALUES} mappings and lists once the files it refers "
    "to are put in (a file reached again and again through files that each refer to it "
    "more than once); refer to what repeats through $defs"
)


def _sharing_key(schema: Any, base_file: Path) -> tuple[str, str]:
    """What a bundle of ``schema`` named from ``base_file`` depends on within one compile
    (besides the files it reads, each parsed once): the folder its ``$ref``s are relative
    to, and its ``repr``, which tells apart every value YAML and JSON give (``1``, ``1.0``,
    ``True``, ``'1'``, ``b'1'``; mapping keys are always strings) and keeps the order of
    keys."""
    return os.path.dirname(base_file), repr(schema)


def _copied(value: Any) -> Any:
    """``value`` with its lists and mappings made anew; what they hold (strings, numbers,
    ``None``) is immutable, and shared."""
    if isinstance(value, dict):
        return {key: _copied(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copied(item) for item in value]
    return value


_NOWHERE = object()


def _pointed(data: Any, pointer: str) -> Any:
    """What the JSON pointer ``pointer`` (``/a/b``; the leading ``/`` may be left out)
    names in ``data``, or ``_NOWHERE``."""
    from referencing import Registry
    from referencing.exceptions import PointerToNowhere
    from referencing.jsonschema import DRAFT202012

    resource = DRAFT202012.create_resource(data)
    try:
        resolved = resource.pointer("/" + pointer.strip("/"), Registry().resolver())
    except (PointerToNowhere, LookupError, TypeError, ValueError):
        return _NOWHERE
    return resolved.contents


def _nests_deeper(data: Any, limit: int) -> bool:
    """Whether lists and mappings in ``data`` nest more than ``limit`` deep (as YAML may not:
    bundling and checking schemas walk them recursively)."""
    pending: list[tuple[Any, int]] = [(data, 0)]
    while pending:
        node, depth = pending.pop()
        if depth > limit:
            return True
        if isinstance(node, dict):
            pending.extend((value, depth + 1) for value in node.values())
        elif isinstance(node, list):
            pending.extend((value, depth + 1) for value in node)
    return False


_JSON_NESTING = re.compile(r'"(?:[^"\\]|\\.)*"|[\[{]|[\]}]')


def _json_depth_position(text: str) -> tuple[int, int]:
    """(line, column) of the first bracket in JSON ``text`` that nests too deep."""
    depth = 0
    for match in _JSON_NESTING.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > MAX_DEPTH + 1:  # the outermost value is at depth 0, in one bracket
                offset = match.start()
                return text.count("\n", 0, offset) + 1, offset - text.rfind("\n", 0, offset)
        elif token in "]}":
            depth -= 1
    return 1, 1
