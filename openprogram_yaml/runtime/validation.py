"""The one home of jsonschema: checking schemas and validating values against them.

Everything else asks this module; nothing else imports ``jsonschema``. Remote ``$ref`` is
never fetched: local references must be bundled into the schema (or its ``registry``)
before a validator is built.

Values are first checked with ``jsonschema_rs`` (compiled, about 100x faster than
walking the schema in Python): every input, tool argument and output of a run is checked,
and most are valid. Only its "valid" is trusted; a value it rejects (or cannot take, or a
schema it cannot build) goes to ``jsonschema``, which decides and words every error, so
errors read exactly as before.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Literal, NoReturn, TypeAlias

if TYPE_CHECKING:
    # Only for annotations: jsonschema is imported on first use (start-up stays light).
    import jsonschema_rs
    from jsonschema.protocols import Validator
    from referencing.jsonschema import SchemaRegistry

    from openprogram_yaml.json_types import JSONValue

__all__ = [
    "SchemaValidator",
    "check_schema",
    "format_path",
    "keyword_mistakes",
    "reference_issues",
    "schema_issues",
]

#: At most this many issues are reported for one value.
MAX_ISSUES = 20


def format_path(path: Iterable[str | int]) -> str:
    """A JSON path like ``$.items[2].name`` from a jsonschema error path."""
    out = "$"
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _validator_class(schema: Mapping[str, object]) -> type[Validator]:
    import jsonschema.validators

    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)


def _no_remote(uri: str) -> NoReturn:
    from referencing.exceptions import NoSuchResource

    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # attrs class


def _registry(resources: Mapping[str, Mapping[str, object]] | None) -> SchemaRegistry:
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    registry: SchemaRegistry = Registry(retrieve=_no_remote)  # type: ignore[call-arg]  # attrs class
    for uri, contents in (resources or {}).items():
        registry = registry.with_resource(
            uri, Resource.from_contents(dict(contents), default_specification=DRAFT202012)
        )
    return registry


_SIMPLE_TYPES = frozenset({"array", "boolean", "integer", "null", "number", "object", "string"})
_SUBSCHEMA = frozenset(
    {
        "not", "if", "then", "else", "items", "contains", "additionalProperties",
        "propertyNames", "unevaluatedItems", "unevaluatedProperties", "contentSchema",
    }
)  # fmt: skip
_SCHEMA_MAPS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)
_SCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_STRINGS = frozenset(
    {
        "title", "description", "$comment", "$ref", "format", "contentEncoding",
        "contentMediaType", "pattern", "$dynamicRef",
    }
)  # fmt: skip
#: Strings the 2020-12 metaschema also matches against a pattern (with ``re.search``, as
#: jsonschema does: ``$`` matches before a final newline there too).
_PATTERNED = {
    "$anchor": r"^[A-Za-z_][-A-Za-z0-9._]*$",
    "$dynamicAnchor": r"^[A-Za-z_][-A-Za-z0-9._]*$",
    "$id": r"^[^#]*#?$",
}
_NUMBERS = frozenset({"maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum"})
_COUNTS = frozenset(
    {
        "maxLength", "minLength", "maxItems", "minItems", "maxContains", "minContains",
        "maxProperties", "minProperties",
    }
)  # fmt: skip
_FLAGS = frozenset({"uniqueItems", "readOnly", "writeOnly", "deprecated"})
_ANY = frozenset({"const", "default"})


_OTHER_KEYWORDS = frozenset(
    {
        "type", "multipleOf", "required", "enum", "examples", "dependentRequired", "$schema",
        "$vocabulary", "dependencies", "$recursiveRef", "$recursiveAnchor",
    }
)  # fmt: skip
#: Every keyword of JSON Schema 2020-12, with the few earlier drafts still use.
KEYWORDS = (
    (_SUBSCHEMA | _SCHEMA_MAPS | _SCHEMA_LISTS | _STRINGS | _NUMBERS | _COUNTS | _FLAGS | _ANY)
    | _OTHER_KEYWORDS
    | _PATTERNED.keys()
)


def keyword_mistakes(schema: object) -> list[tuple[tuple[str | int, ...], str]]:
    """Keys of ``schema`` (and of its subschemas) that are not keywords and look like
    mistakes, each with its path in the schema: a key with no value (in a YAML ``{...}``
    mapping, a comma inside unquoted text starts a new key), or one a letter or two away
    from a keyword (``requried``). Other unknown keys are annotations, as JSON Schema
    allows (``x-…`` extensions, for instance)."""
    found: list[tuple[tuple[str | int, ...], str]] = []
    _find_mistakes(schema, (), found)
    return found


def _find_mistakes(
    schema: object, path: tuple[str | int, ...], found: list[tuple[tuple[str | int, ...], str]]
) -> None:
    if not isinstance(schema, dict):
        return
    for key, value in schema.items():
        here = (*path, key)
        # Patterns are compiled when a reply is checked: a bad one would fail every attempt.
        if key == "pattern" and isinstance(value, str):
            _check_regex(value, here, found)
        elif key == "patternProperties" and isinstance(value, dict):
            for name in value:
                _check_regex(name, (*here, name), found)
        if key in _SUBSCHEMA:
            if isinstance(value, list):  # "items" as a list, before 2020-12
                for i, sub in enumerate(value):
                    _find_mistakes(sub, (*here, i), found)
            else:
                _find_mistakes(value, here, found)
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            for name, sub in value.items():
                _find_mistakes(sub, (*here, name), found)
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            for i, sub in enumerate(value):
                _find_mistakes(sub, (*here, i), found)
        elif key in KEYWORDS or not isinstance(key, str) or key.startswith("x-"):
            continue
        elif value is None:
            found.append(
                (
                    here,
                    f"'{key}' is not a JSON Schema keyword, and has no value: in a {{...}} "
                    "mapping a comma ends unquoted text, and what follows becomes a key; "
                    "put text holding a comma in quotes",
                )
            )
        else:
            close = difflib.get_close_matches(key, sorted(KEYWORDS), n=1, cutoff=0.8)
            if close:
                found.append((here, f"unknown keyword '{key}'; did you mean '{close[0]}'?"))


def _check_regex(
    pattern: str, path: tuple[str | int, ...], found: list[tuple[tuple[str | int, ...], str]]
) -> None:
    try:
        re.compile(pattern)
    except re.error as exc:
        found.append((path, f"{pattern!r} is not a valid regular expression: {exc}"))
        return
    from openprogram_yaml.regex_safety import exponential_backtracking  # parses, not runs

    risk = exponential_backtracking(pattern)
    if risk is not None:
        # Python's re backtracks without a time limit: checking a reply or an input against
        # it could hold the process for minutes (the validator words its error with re).
        found.append(
            (
                path,
                f"{pattern!r} {risk.shape}: checking text against it can take exponential "
                f"time; {risk.fix}",
            )
        )


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _unique_strings(value: object) -> bool:
    return (
        isinstance(value, list)
        and all(isinstance(v, str) for v in value)
        and len(set(value)) == len(value)
    )


def _plainly_valid(schema: object) -> bool:
    """True when ``schema`` uses only well-known 2020-12 keywords, each with a value of the
    right shape: then the metaschema accepts it, and the slow full check can be skipped.
    False means "not sure", never "invalid": the full check decides (and words the errors).
    """
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, dict):
        return False
    for key, value in schema.items():
        if key in _SUBSCHEMA:
            ok = _plainly_valid(value)
        elif key in _SCHEMA_MAPS:
            ok = isinstance(value, dict) and all(_plainly_valid(v) for v in value.values())
        elif key in _SCHEMA_LISTS:
            ok = isinstance(value, list) and bool(value) and all(_plainly_valid(v) for v in value)
        elif key == "type":
            ok = (
                value in _SIMPLE_TYPES
                if isinstance(value, str)
                else (
                    isinstance(value, list)
                    and bool(value)
                    and all(isinstance(v, str) and v in _SIMPLE_TYPES for v in value)
                    and len(set(value)) == len(value)
                )
            )
        elif key in _STRINGS:
            ok = isinstance(value, str)
        elif key in _PATTERNED:
            ok = isinstance(value, str) and re.search(_PATTERNED[key], value) is not None
        elif key in _NUMBERS:
            ok = _is_number(value)
        elif key == "multipleOf":
            ok = _is_number(value) and value > 0
        elif key in _COUNTS:
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        elif key == "required":
            ok = _unique_strings(value)
        elif key in _FLAGS:
            ok = isinstance(value, bool)
        elif key in ("enum", "examples"):
            ok = isinstance(value, list)
        elif key == "dependentRequired":
            ok = isinstance(value, dict) and all(_unique_strings(v) for v in value.values())
        else:
            ok = key in _ANY
        if not ok:
            return False
    return True


def schema_issues(schema: object) -> list[tuple[tuple[str | int, ...], str]]:
    """Problems that make ``schema`` an invalid JSON Schema, each with its path in the schema."""
    if isinstance(schema, bool):
        return []
    if not isinstance(schema, Mapping):
        return [((), f"a JSON Schema must be an object or a boolean, not {type(schema).__name__}")]
    if _plainly_valid(schema):
        return []
    try:
        key = json.dumps(schema, sort_keys=True)
    except (TypeError, ValueError):
        return _meta_issues(schema)
    return list(_meta_issues_cached(key))


@functools.lru_cache(maxsize=2048)
def _meta_issues_cached(key: str) -> tuple[tuple[tuple[str | int, ...], str], ...]:
    # Repositories repeat schemas (shared $refs, the same input shapes): check each once.
    return tuple(_meta_issues(json.loads(key)))


def _meta_issues(schema: Mapping[str, JSONValue]) -> list[tuple[tuple[str | int, ...], str]]:
    cls = _validator_class(schema)
    meta = cls(cls.META_SCHEMA)
    issues: list[tuple[tuple[str | int, ...], str]] = []
    for err in sorted(meta.iter_errors(schema), key=lambda e: [str(p) for p in e.path]):
        # The deepest matching sub-error names the real mistake ("'strin' is not one of …").
        best = err
        while best.context:
            best = min(
                best.context, key=lambda e: (e.validator != "enum", -len(e.path), len(e.message))
            )
        issues.append((tuple(best.absolute_path), best.message))
        if len(issues) >= MAX_ISSUES:
            break
    return issues


def _short(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


#: How a broken rule is worded; ``{}`` is the keyword's value in the schema.
_RULES = {
    "type": "must be of type {}",
    "enum": "must be one of {}",
    "const": "must be exactly {}",
    "additionalProperties": "has a property the schema does not allow",
    "unevaluatedProperties": "has a property the schema does not allow",
    "propertyNames": "has a property name the schema does not allow",
    "minimum": "must be >= {}",
    "maximum": "must be <= {}",
    "exclusiveMinimum": "must be > {}",
    "exclusiveMaximum": "must be < {}",
    "multipleOf": "must be a multiple of {}",
    "minLength": "must be at least {} characters long",
    "maxLength": "must be at most {} characters long",
    "pattern": "must match the pattern {}",
    "format": "must be a valid {}",
    "minItems": "must have at least {} items",
    "maxItems": "must have at most {} items",
    "uniqueItems": "items must be unique",
    "items": "has items the schema does not allow",
    "prefixItems": "has items the schema does not allow",
    "unevaluatedItems": "has items the schema does not allow",
    "contains": "has no item matching 'contains'",
    "minContains": "must have at least {} items matching 'contains'",
    "maxContains": "must have at most {} items matching 'contains'",
    "minProperties": "must have at least {} properties",
    "maxProperties": "must have at most {} properties",
    "anyOf": "matches none of the schemas in 'anyOf'",
    "oneOf": "must match exactly one of the schemas in 'oneOf'",
    "not": "matches the schema in 'not'",
}


def _rule(keyword: object, expected: object) -> str:
    """The rule a value broke, worded from the schema alone (``expected`` is the keyword's
    value in the schema, never the model's)."""
    if keyword is None:  # a ``false`` subschema
        return "no value is allowed here"
    template = _RULES.get(str(keyword))
    if template is None:
        return f"breaks the '{keyword}' rule"
    return template.format(_short(expected))


def check_schema(schema: object) -> list[str]:
    """Problems that make ``schema`` an invalid JSON Schema; empty when it is valid."""
    out = []
    for path, message in schema_issues(schema):
        where = format_path(path)
        out.append(f"{where}: {message}" if where != "$" else message)
    return out


#: Keywords that apply a subschema to the same value, not to a part of it: a ``$ref`` that
#: comes back to itself through only these never reaches a smaller value, so it never ends.
_IN_PLACE = frozenset({"allOf", "anyOf", "oneOf", "not", "if", "then", "else", "$ref"})


def _pointer(root: object, ref: str) -> object:
    """The subschema a local ``#/a/b`` reference names, or ``None``."""
    node = root
    for raw in ref[2:].split("/") if ref != "#" else []:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _in_place_refs(node: object) -> list[str]:
    """The local ``$ref``s ``node`` applies to the same value (through allOf, not, ...)."""
    found: list[str] = []
    if not isinstance(node, dict):
        return found
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str):
            found.append(value)
        elif key in _IN_PLACE and isinstance(value, dict):
            found.extend(_in_place_refs(value))
        elif key in _IN_PLACE and isinstance(value, list):
            for sub in value:
                found.extend(_in_place_refs(sub))
    return found


def reference_issues(schema: object) -> list[str]:
    """``$ref``s a schema passed in as data cannot use: remote ones (never fetched) and
    cycles that come back to the same value without descending into it (``a`` -> ``b`` ->
    ``a``), which no validator can finish. Recursion through ``properties`` or ``items``
    (a tree) is fine. Refs must be local (``#…``); ``#/…`` pointers must resolve."""
    issues: list[str] = []
    refs: set[str] = set()

    def walk(node: object, path: tuple[str | int, ...]) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "$ref" and isinstance(value, str):
                    refs.add(value)
                    if not value.startswith("#"):
                        issues.append(
                            f"{format_path(path)}: $ref {value!r} is not local; remote "
                            "references are never fetched: put the schema under $defs"
                        )
                    elif (value.startswith("#/") or value == "#") and _pointer(
                        schema, value
                    ) is None:
                        issues.append(f"{format_path(path)}: $ref {value!r} names nothing")
                walk(value, (*path, key))
        elif isinstance(node, list):
            for i, item in enumerate(node):
                walk(item, (*path, i))

    walk(schema, ())
    for start in sorted(r for r in refs if r == "#" or r.startswith("#/")):
        seen = [start]
        todo = list(_in_place_refs(_pointer(schema, start)))
        while todo:
            ref = todo.pop()
            if ref == start:
                issues.append(
                    f"$ref {start!r} refers back to itself without descending into the value "
                    "(an endless loop); recursion must go through properties or items"
                )
                break
            if ref in seen or not (ref == "#" or ref.startswith("#/")):
                continue
            seen.append(ref)
            todo.extend(_in_place_refs(_pointer(schema, ref)))
        if len(issues) >= MAX_ISSUES:
            break
    return issues[:MAX_ISSUES]


#: What a pickled ``SchemaValidator`` keeps: the schema and the resources its refs name.
_State: TypeAlias = "tuple[Mapping[str, object] | bool, Mapping[str, Mapping[str, object]] | None]"


class SchemaValidator:
    """Validates JSON values against one schema. Build once, call often.

    The jsonschema validator itself is made on the first call: a repository declares many
    schemas, and a run uses few of them.
    """

    __slots__ = ("_fast", "_resources", "_validator", "schema")

    def __init__(
        self,
        schema: Mapping[str, object] | bool,
        *,
        resources: Mapping[str, Mapping[str, object]] | None = None,
    ) -> None:
        self.schema = schema
        self._resources = resources
        self._validator: Validator | None = None
        #: The compiled check: None until first use, False where there is none.
        self._fast: jsonschema_rs.Validator | Literal[False] | None = None

    def __getstate__(self) -> _State:
        # The jsonschema validator stays behind (it holds functions); it is made again on
        # first use.
        return self.schema, self._resources

    def __setstate__(self, state: _State) -> None:
        self.schema, self._resources = state
        self._validator = None
        self._fast = None

    def _built(self) -> Validator:
        if self._validator is None:
            schema = self.schema
            cls = _validator_class(schema if isinstance(schema, Mapping) else {})
            self._validator = cls(schema, registry=_registry(self._resources))
        return self._validator

    def _passes(self, value: JSONValue) -> bool:
        """True when the compiled check finds ``value`` valid; False means "not sure"."""
        fast = self._fast
        if fast is None:
            fast = self._fast = _compiled(self.schema, self._resources)
        if fast is False or not _plain_value(value):
            return False
        try:
            return fast.is_valid(value)
        except Exception:  # a value it cannot take (not JSON): jsonschema decides
            return False

    def errors(self, value: JSONValue) -> list[str]:
        """Readable problems with ``value`` (``$.path: message``), at most ``MAX_ISSUES``."""
        if self._passes(value):
            return []
        issues: list[str] = []
        try:
            found = sorted(self._built().iter_errors(value), key=lambda e: list(e.path))
        except Exception as exc:  # an unresolvable $ref surfaces only while validating
            return [f"$: the schema could not be applied: {exc}"]
        for err in found:
            issues.append(f"{format_path(err.path)}: {err.message}")
            if len(issues) >= MAX_ISSUES:
                break
        return issues

    def rule_errors(self, value: JSONValue) -> list[str]:
        """Like ``errors``, but each problem names its path and the rule it breaks, never
        the value: what a model answered stays out of errors, events and repair prompts."""
        if self._passes(value):
            return []
        issues: list[str] = []
        try:
            found = sorted(self._built().iter_errors(value), key=lambda e: list(e.path))
        except Exception:  # an unresolvable $ref surfaces only while validating
            return ["$: the schema could not be applied to the value"]
        for err in found:
            if err.validator in ("required", "dependentRequired"):
                # These name a property the schema lists, not anything from the value.
                rule = err.message
            else:
                rule = _rule(err.validator, err.validator_value)
            issues.append(f"{format_path(err.path)}: {rule}")
            if len(issues) >= MAX_ISSUES:
                break
        return issues

    def is_valid(self, value: JSONValue) -> bool:
        return self._passes(value) or not self.errors(value)


def _compiled(
    schema: Mapping[str, object] | bool, resources: Mapping[str, Mapping[str, object]] | None
) -> jsonschema_rs.Validator | Literal[False]:
    """``schema`` compiled by ``jsonschema_rs``, or False where jsonschema alone checks:
    a schema with separate resources (none is given today), or one it cannot build (an
    unresolvable ``$ref``, a pattern its regex engine does not take). Formats are not
    asserted, as jsonschema does not without a format checker; nothing is fetched.

    Only for a schema both read alike (``_read_alike``): any keyword the two check
    differently can turn a "valid" wrong, even one it is stricter on (under ``not``)."""
    if resources or not _read_alike(schema):
        return False
    import jsonschema_rs

    try:
        return jsonschema_rs.validator_for(
            dict(schema) if isinstance(schema, Mapping) else schema,
            validate_formats=False,
            offline=True,
        )
    except Exception:
        return False


#: 2020-12 keywords the two check differently, or resolve in ways not compared here:
#: ``pattern``s (its regex engine reads ``\D``, ``\W``, ``\S`` and ``[^\d]`` as ASCII
#: classes, Python's ``re`` as Unicode ones), the content keywords (it may assert them),
#: and base URIs and dynamic references.
_NOT_ALIKE = frozenset(
    {
        "pattern", "patternProperties", "contentEncoding", "contentMediaType",
        "contentSchema", "$id", "$anchor", "$dynamicRef", "$dynamicAnchor",
    }
)  # fmt: skip
_DRAFT_2020_12 = (
    "https://json-schema.org/draft/2020-12/schema",
    "https://json-schema.org/draft/2020-12/schema#",
)


def _read_alike(schema: Mapping[str, object] | bool) -> bool:
    """True when ``jsonschema_rs`` and jsonschema give the same answer for every value:
    a 2020-12 schema (``$schema`` absent or 2020-12) of well-known keywords only
    (``_plainly_valid``: no ``dependencies``, no keyword of another draft, no unknown key),
    none of ``_NOT_ALIKE``, local ``$ref``s only, and every ``multipleOf`` an integer (it
    divides exactly, jsonschema in floats: 0.3 is a multiple of 0.1 for it, not for
    jsonschema). Keys are looked for anywhere, property names too: that only costs a
    schema the compiled check."""
    if isinstance(schema, bool):
        return True
    rest = dict(schema)
    if rest.pop("$schema", _DRAFT_2020_12[0]) not in _DRAFT_2020_12:
        return False
    return _plainly_valid(rest) and not _differs(rest)


def _differs(schema: object) -> bool:
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key in _NOT_ALIKE:
                return True
            if key == "multipleOf" and not isinstance(value, int):
                return True
            if key == "$ref" and not (isinstance(value, str) and value.startswith("#")):
                return True
            if _differs(value):
                return True
    elif isinstance(schema, list):
        return any(_differs(item) for item in schema)
    return False


def _plain_value(value: object) -> bool:
    """False when ``value`` holds what ``jsonschema_rs`` reads differently: a tuple (it
    takes one as an array, jsonschema does not: a Python caller's input), an infinity or
    NaN (``json.loads`` makes them from ``Infinity``/``NaN``; it rejects them as numbers,
    which under ``not`` turns into a wrong "valid"). A loop over a stack, exact types
    first: it runs before every compiled check."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is float:
            if item - item != 0:  # type: ignore[operator]  # infinity or NaN
                return False
        elif kind in _LEAVES:
            continue
        elif isinstance(item, tuple):
            return False
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


_LEAVES = frozenset({str, int, bool, type(None)})
