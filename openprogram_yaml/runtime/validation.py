"""The one home of jsonschema: checking schemas and validating values against them.

Everything else asks this module; nothing else imports ``jsonschema``. Remote ``$ref`` is
never fetched: local references must be bundled into the schema (or its ``registry``)
before a validator is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["SchemaValidator", "check_schema", "format_path", "schema_issues"]

#: At most this many issues are reported for one value.
MAX_ISSUES = 20


def format_path(path: Any) -> str:
    """A JSON path like ``$.items[2].name`` from a jsonschema error path."""
    out = "$"
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _validator_class(schema: Mapping[str, Any]) -> Any:
    import jsonschema.validators

    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)


def _no_remote(uri: str) -> Any:
    from referencing.exceptions import NoSuchResource

    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # attrs class


def _registry(resources: Mapping[str, Mapping[str, Any]] | None) -> Any:
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    registry: Any = Registry(retrieve=_no_remote)  # type: ignore[call-arg]  # attrs class
    for uri, contents in (resources or {}).items():
        registry = registry.with_resource(
            uri, Resource.from_contents(dict(contents), default_specification=DRAFT202012)
        )
    return registry


def schema_issues(schema: Any) -> list[tuple[tuple[str | int, ...], str]]:
    """Problems that make ``schema`` an invalid JSON Schema, each with its path in the schema."""
    if isinstance(schema, bool):
        return []
    if not isinstance(schema, Mapping):
        return [((), f"a JSON Schema must be an object or a boolean, not {type(schema).__name__}")]
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


def check_schema(schema: Any) -> list[str]:
    """Problems that make ``schema`` an invalid JSON Schema; empty when it is valid."""
    out = []
    for path, message in schema_issues(schema):
        where = format_path(path)
        out.append(f"{where}: {message}" if where != "$" else message)
    return out


class SchemaValidator:
    """Validates JSON values against one schema. Build once, call often."""

    __slots__ = ("_validator", "schema")

    def __init__(
        self,
        schema: Mapping[str, Any] | bool,
        *,
        resources: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.schema = schema
        cls = _validator_class(schema if isinstance(schema, Mapping) else {})
        self._validator = cls(schema, registry=_registry(resources))

    def errors(self, value: Any) -> list[str]:
        """Readable problems with ``value`` (``$.path: message``), at most ``MAX_ISSUES``."""
        issues: list[str] = []
        try:
            found = sorted(self._validator.iter_errors(value), key=lambda e: list(e.path))
        except Exception as exc:  # an unresolvable $ref surfaces only while validating
            return [f"$: the schema could not be applied: {exc}"]
        for err in found:
            issues.append(f"{format_path(err.path)}: {err.message}")
            if len(issues) >= MAX_ISSUES:
                break
        return issues

    def is_valid(self, value: Any) -> bool:
        return not self.errors(value)
