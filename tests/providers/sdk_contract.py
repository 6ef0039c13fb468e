"""Check request bodies against the official SDKs' request types (test-only dependencies).

``assert_valid_request(Type, body)`` validates with pydantic (the SDK types are TypedDicts;
their ``Iterable`` fields validate lazily, so every iterator is drained) and then walks the
body against the type hints to reject keys the type does not declare, which pydantic
ignores on TypedDicts.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from typing import Any, Literal, NotRequired, Required, Union, get_args, get_origin, get_type_hints

from pydantic import BaseModel, TypeAdapter
from typing_extensions import is_typeddict

_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def assert_valid_request(request_type: Any, body: dict[str, Any]) -> None:
    adapter = _ADAPTERS.get(request_type)
    if adapter is None:
        adapter = _ADAPTERS[request_type] = TypeAdapter(request_type)
    _drain(adapter.validate_python(body))
    problems = _check(body, request_type, "$")
    assert not problems, "\n".join(problems)


def _drain(value: Any) -> Any:
    if isinstance(value, collections.abc.Iterator):  # pydantic's lazy ValidatorIterator
        return [_drain(v) for v in value]
    if isinstance(value, dict):
        return {k: _drain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_drain(v) for v in value]
    return value


_SEQUENCES = {
    list,
    collections.abc.Iterable,
    collections.abc.Sequence,
    collections.abc.Collection,
}


def _strip(tp: Any) -> Any:
    while get_origin(tp) in (Required, NotRequired, typing.Annotated):
        tp = get_args(tp)[0]
    return tp


def _depth(problems: list[str]) -> tuple[int, int]:
    return (min(len(p.partition(": ")[0]) for p in problems), -len(problems))


def _check(value: Any, tp: Any, path: str) -> list[str]:
    tp = _strip(tp)
    origin = get_origin(tp)
    if tp is Any or tp is object:
        return []
    if origin in (Union, types.UnionType):
        best: list[str] | None = None
        for alternative in get_args(tp):
            problems = _check(value, alternative, path)
            if not problems:
                return []
            # Report the alternative that got furthest: its problems sit deepest.
            if best is None or _depth(problems) > _depth(best):
                best = problems
        return best or [f"{path}: matches no alternative"]
    if tp is type(None):
        return [] if value is None else [f"{path}: expected null"]
    if origin is Literal:
        return [] if value in get_args(tp) else [f"{path}: {value!r} not in {get_args(tp)}"]
    if is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{path}: expected an object for {tp.__name__}"]
        hints = get_type_hints(tp, include_extras=True)
        problems = [f"{path}: unknown key {k!r} for {tp.__name__}" for k in value if k not in hints]
        problems += [
            f"{path}: missing {k!r} for {tp.__name__}"
            for k in tp.__required_keys__
            if k not in value
        ]
        for key, item in value.items():
            if key in hints:
                problems += _check(item, hints[key], f"{path}.{key}")
        return problems
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        if not isinstance(value, dict):
            return [f"{path}: expected an object for {tp.__name__}"]
        fields = {(f.alias or name): f for name, f in tp.model_fields.items()}
        problems = [
            f"{path}: unknown key {k!r} for {tp.__name__}" for k in value if k not in fields
        ]
        for key, item in value.items():
            if key in fields:
                problems += _check(item, fields[key].annotation, f"{path}.{key}")
        return problems
    if origin in _SEQUENCES or tp in _SEQUENCES or "SequenceNotStr" in repr(origin or tp):
        if not isinstance(value, list):
            return [f"{path}: expected an array"]
        args = get_args(tp)
        item_type = args[0] if args else Any
        return [p for i, v in enumerate(value) for p in _check(v, item_type, f"{path}[{i}]")]
    if origin in (dict, collections.abc.Mapping) or tp is dict:
        if not isinstance(value, dict):
            return [f"{path}: expected an object"]
        args = get_args(tp)
        if not args:
            return []
        return [p for k, v in value.items() for p in _check(v, args[1], f"{path}.{k}")]
    if tp is bool:
        return [] if isinstance(value, bool) else [f"{path}: expected a boolean"]
    if tp in (int, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return [] if ok else [f"{path}: expected a number"]
    if tp is str:
        return [] if isinstance(value, str) else [f"{path}: expected a string"]
    return []  # file inputs, pydantic models and the like: pydantic checked them
