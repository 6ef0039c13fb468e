"""The fields of a ``choices`` option as JSON Schema: from a function's signature, from JSON
Schema as given, or from the Python callers' mini-language.

The mini-language: ``{field: type}`` with ``str/int/float/bool/list/dict``, ``field:
"description"`` (a described string), ``field: [subschema]`` (exactly one item template),
nested dicts, and ``{"type": T, "description": ..., "options": [...]}`` meta-specs. Its fields
are all required, as the seed's options require every declared field.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Mapping

from openprogram_yaml.json_types import JSONObject, JSONValue
from openprogram_yaml.runtime.validators import validator_for

__all__ = ["fields_schema", "signature_schema"]

_PY_TYPES: dict[object, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    dict: "object",
}
_PY_NAMES = {t.__name__: name for t, name in _PY_TYPES.items() if isinstance(t, type)}
_JSON_TYPES = frozenset({"string", "integer", "number", "boolean", "array", "object", "null"})
# Keys that only JSON Schema uses at the top of an object schema; the mini-language names
# fields, and a field called "properties" or "$ref" is not worth the ambiguity.
_SCHEMA_KEYS = frozenset({"properties", "$ref", "anyOf", "oneOf", "allOf", "$defs", "enum"})
_META_KEYS = frozenset({"type", "description", "options"})


def _annotation_schema(annotation: object) -> JSONObject:
    """The schema of a parameter annotation; ``{}`` (anything) for what has no JSON type."""
    if isinstance(annotation, str):
        base = annotation.split("[", 1)[0].strip()
        return {"type": _PY_NAMES[base]} if base in _PY_NAMES else {}
    if annotation in _PY_TYPES:
        return {"type": _PY_TYPES[annotation]}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return {"enum": [a for a in args if isinstance(a, str | int | float | bool)]}
    if origin in (typing.Union, types.UnionType):
        present = [a for a in args if a is not type(None)]
        return _annotation_schema(present[0]) if len(present) == 1 else {}
    if origin is list and len(args) == 1:
        return {"type": "array", "items": _annotation_schema(args[0])}
    if origin in _PY_TYPES:
        return {"type": _PY_TYPES[origin]}
    return {}


def signature_schema(fn: Callable[..., object]) -> JSONObject:
    """The arguments of ``fn``: required when they have no default; with ``**kwargs`` any
    other field is passed on too."""
    try:
        sig = inspect.signature(fn, eval_str=True)
    except (NameError, TypeError, ValueError):
        sig = inspect.signature(fn)
    props: JSONObject = {}
    required: list[JSONValue] = []
    open_ended = False
    for param in sig.parameters.values():
        if param.kind is param.VAR_KEYWORD:
            open_ended = True
            continue
        if param.kind is param.VAR_POSITIONAL or param.name == "self":
            continue
        prop = {} if param.annotation is param.empty else _annotation_schema(param.annotation)
        if param.default is param.empty:
            required.append(param.name)
        elif param.default is None or isinstance(param.default, str | int | float | bool):
            prop["default"] = param.default
        props[param.name] = prop
    return {
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": open_ended,
    }


def _is_json_schema(spec: Mapping[object, object]) -> bool:
    if _SCHEMA_KEYS & spec.keys():
        return True
    kind = spec.get("type")
    return isinstance(kind, str) and kind in _JSON_TYPES


def fields_schema(spec: object, *, where: str) -> JSONObject:
    """An option's fields as JSON Schema, from JSON Schema or the mini-language.

    ``TypeError`` for a shape the mini-language does not have; ``StructuredOutputSchemaError``
    for JSON Schema that is not valid."""
    if not isinstance(spec, Mapping):
        raise TypeError(
            f"{where}: fields are a mapping (JSON Schema or {{field: type}}), "
            f"not {type(spec).__name__}"
        )
    if _is_json_schema(spec):
        schema = _json_object(spec, where)
        validator_for(schema, what=where)
        return schema
    return _object(spec, where)


def _object(spec: Mapping[object, object], where: str) -> JSONObject:
    props: JSONObject = {}
    for name, value in spec.items():
        if not isinstance(name, str):
            raise TypeError(f"{where}: field names are strings, not {name!r}")
        props[name] = _field(value, f"{where}.{name}")
    return {
        "type": "object",
        "properties": props,
        "required": list(props),
        "additionalProperties": False,
    }


def _field(value: object, where: str) -> JSONObject:
    if isinstance(value, str):
        return {"type": "string", "description": value}
    if isinstance(value, list):
        if len(value) != 1:
            raise TypeError(
                f"{where}: a list field holds exactly one item template, not {len(value)}"
            )
        return {"type": "array", "items": _field(value[0], f"{where}[]")}
    if isinstance(value, Mapping):
        if _is_json_schema(value):
            return _json_object(value, where)
        if _is_meta(value):
            return _meta(value, where)
        return _object(value, where)
    schema = _annotation_schema(value)
    if not schema:
        raise TypeError(
            f"{where}: expected str, int, float, bool, list, dict, a description, "
            f"[item], a nested mapping or {{'type': ..., 'options': [...]}}; got {value!r}"
        )
    return schema


def _json(value: object, where: str) -> JSONValue:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Mapping):
        return _json_object(value, where)
    if isinstance(value, list | tuple):
        return [_json(item, where) for item in value]
    raise TypeError(f"{where}: {value!r} is not JSON; JSON Schema holds JSON values only")


def _json_object(value: Mapping[object, object], where: str) -> JSONObject:
    out: JSONObject = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise TypeError(f"{where}: schema keys are strings, not {key!r}")
        out[key] = _json(item, f"{where}.{key}")
    return out


def _is_meta(value: Mapping[object, object]) -> bool:
    """``{"type": T, ...}`` with a Python type, or ``options`` beside meta keys only."""
    if not value.keys() <= _META_KEYS:
        return False
    return isinstance(value.get("type"), type) or "options" in value


def _meta(value: Mapping[object, object], where: str) -> JSONObject:
    kind = value.get("type", str)
    if isinstance(kind, str):  # a type named in words: "int" or JSON Schema's "integer"
        kind = _PY_NAMES.get(kind, kind)
        schema: JSONObject = {"type": kind} if kind in _JSON_TYPES else {}
    else:
        schema = _field(kind, where) if kind is not None else {}
    description = value.get("description")
    if description is not None:
        schema["description"] = str(description)
    options = value.get("options")
    if options is not None:
        if not isinstance(options, list | tuple) or not options:
            raise TypeError(f"{where}: 'options' is a non-empty list of allowed values")
        schema["enum"] = [o for o in options if isinstance(o, str | int | float | bool)]
    return schema
