"""Cached validators: each schema is checked and compiled once, then reused on every call.

The cache is keyed by the schema object's identity (it keeps the object alive, so the id
cannot be reused) with a fallback on its canonical JSON, so that a schema rebuilt per call
as an equal literal still hits. Schemas are treated as immutable once used. A schema with a
key that is not a string (YAML reads ``{1: …}`` as a number) has no canonical JSON (it
would read like ``{"1": …}``, which validates differently), so only its identity is kept.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from openprogram_yaml.errors import StructuredOutputSchemaError
from openprogram_yaml.runtime.validation import SchemaValidator, check_schema

__all__ = ["validator_for"]

_MAX_ENTRIES = 512
_by_id: dict[int, tuple[object, SchemaValidator]] = {}
_by_text: dict[str, SchemaValidator] = {}
_lock = threading.Lock()


def _text_keys_only(value: Any) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _text_keys_only(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_text_keys_only(v) for v in value)
    return True


def validator_for(schema: Mapping[str, object] | bool, *, what: str = "schema") -> SchemaValidator:
    """A validator for ``schema``; ``StructuredOutputSchemaError`` if it is not a valid schema."""
    hit = _by_id.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    try:
        key = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise StructuredOutputSchemaError(
            f"the {what} is not JSON-serialisable", issues=[str(exc)]
        ) from exc
    text_key = key if _text_keys_only(schema) else None
    validator = _by_text.get(text_key) if text_key is not None else None
    if validator is None:
        issues = check_schema(schema)
        if issues:
            raise StructuredOutputSchemaError(
                f"the {what} is not a valid JSON Schema", issues=issues
            )
        validator = SchemaValidator(schema)
    with _lock:
        if len(_by_id) >= _MAX_ENTRIES:
            _by_id.clear()
        if len(_by_text) >= _MAX_ENTRIES:
            _by_text.clear()
        _by_id[id(schema)] = (schema, validator)
        if text_key is not None:
            _by_text[text_key] = validator
    return validator
