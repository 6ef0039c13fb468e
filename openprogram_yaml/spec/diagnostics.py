"""Turn validation failures into positioned, actionable diagnostics.

pydantic says *what* is wrong by a path through the data; the source map says *where* that
path is in the file. Misspelt keys get a did-you-mean from the keys the model allows there.
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ..errors import Diagnostic
from .suggest import close_matches, did_you_mean
from .yamlread import Loc, SourceMap

__all__ = ["validation_diagnostics", "without_unknown_keys"]

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


def _unwrap(annotation: Any) -> list[Any]:
    """The concrete types inside Optional/Union/Annotated."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        out: list[Any] = []
        for arg in typing.get_args(annotation):
            out.extend(_unwrap(arg))
        return out
    return [annotation]


def _model_at(root: type[BaseModel], loc: Sequence[str | int]) -> type[BaseModel] | None:
    """The model class that describes the mapping at ``loc``, if there is one."""
    current: list[Any] = [root]
    for part in loc:
        following: list[Any] = []
        for ann in current:
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                fields = {f.alias or n: f for n, f in ann.model_fields.items()}
                if isinstance(part, str) and part in fields:
                    following.extend(_unwrap(fields[part].annotation))
                continue
            origin = typing.get_origin(ann)
            args = typing.get_args(ann)
            if origin is dict and len(args) == 2:
                following.extend(_unwrap(args[1]))
            elif origin is list and args:
                following.extend(_unwrap(args[0]))
        current = following
    for ann in current:
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            return ann
    return None


def _data_path(data: Any, loc: Sequence[str | int]) -> Loc:
    """``loc`` without the union-branch labels pydantic adds (keep what exists in the data)."""
    out: list[str | int] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and isinstance(part, str) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            continue  # a label pydantic added (a union branch), not a step into the data
        out.append(part)
    return tuple(out)


def _where(loc: Loc) -> str:
    """A readable name for the place ``loc`` points at."""
    if not loc:
        return "the document"
    if len(loc) >= 2 and loc[0] == "methods":
        rest = ".".join(str(p) for p in loc[2:])
        return f"method '{loc[1]}'" + (f", '{rest}'" if rest else "")
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return f"'{text}'"


#: pydantic type-error kinds, as a reader would name what was expected.
_EXPECTED = {
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "list_type": "a list",
    "string_type": "a string",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def validation_diagnostics(
    exc: ValidationError, data: Any, source: SourceMap, root: type[BaseModel]
) -> list[Diagnostic]:
    """One diagnostic per distinct problem, at the node it concerns."""
    seen: dict[tuple[Loc, str], list[str]] = {}
    types_seen: dict[tuple[Loc, str], Any] = {}
    order: list[tuple[Loc, str, str]] = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        kind = err["type"]
        path = _data_path(data, loc)
        if kind == "extra_forbidden":
            key = str(loc[-1])
            parent = path[:-1] if path and path[-1] == key else path
            model = _model_at(root, parent)
            allowed = sorted(f.alias or n for n, f in model.model_fields.items()) if model else []
            hint = did_you_mean(key, allowed)
            if not hint and allowed:
                hint = "; allowed keys: " + ", ".join(allowed)
            where = "" if not parent else f" in {_where(parent)}"
            order.append(((*parent, key), "key", f"unknown key '{key}'{where}{hint}"))
            continue
        if kind == "missing":
            field = str(loc[-1])
            parent = path
            what = f"missing required key '{field}'" + (f" in {_where(parent)}" if parent else "")
            if field == "version" and not parent:
                what = "missing 'version: 1' (the format version) at the top of the file"
            order.append((parent, "key" if parent else "value", what))
            continue
        if loc and str(loc[-1]) == "[key]":  # loc is () for a whole-document rule
            pos_path = (*path, str(loc[-2])) if len(loc) >= 2 else path
            message = str(err["msg"]).removeprefix("Value error, ")
            order.append((pos_path, "key", message))
            continue
        msg = str(err["msg"])
        if kind in _EXPECTED:
            msg = f"expected {_EXPECTED[kind]}"
            got = err.get("input")
            if kind in ("dict_type", "model_type", "model_attributes_type") and got is None:
                msg = "expected a mapping, but the value is empty"
            label = f"{_where(path)}: " if path else ""
            group = seen.setdefault((path, label), [])
            if msg not in group:
                group.append(msg)
            types_seen[(path, label)] = got
            continue
        if kind == "too_short" and loc == ("methods",):
            msg = "an agent needs at least one method"
        elif kind == "literal_error" and loc == ("version",):
            msg = f"unsupported version {_short(err.get('input'))}; this release reads version 1"
        elif kind == "value_error":
            msg = msg.removeprefix("Value error, ")
        elif "input" in err and not isinstance(err["input"], dict | list):
            msg = f"{msg[:1].lower()}{msg[1:]} (got {_short(err['input'])})"
        else:
            msg = msg[:1].lower() + msg[1:]
        label = f"{_where(path)}: " if path else ""
        group = seen.setdefault((path, label), [])
        if msg not in group:
            group.append(msg)
    for (path, label), msgs in seen.items():
        if (path, label) in types_seen:
            names = [m.removeprefix("expected ") for m in msgs if m.startswith("expected ")]
            rest = [m for m in msgs if not m.startswith("expected ")]
            text = "expected " + " or ".join(names) if names else ""
            got = types_seen[(path, label)]
            if text and got is not None:
                text += f", got {_short(got)}"
            msgs = [t for t in [text, *rest] if t]
        order.append((path, "value", label + "; ".join(msgs)))
    out: list[Diagnostic] = []
    for path, which, message in order:
        pos = source.at(path, key=(which == "key"))
        out.append(Diagnostic(pos.path, pos.line, pos.col, message))
    return out


def without_unknown_keys(
    exc: ValidationError, data: Any, source: SourceMap, root: type[M]
) -> tuple[M, SourceMap] | None:
    """The document read as if its unknown keys were not there, when they are its only
    problems: so the rest of it (templates, tools, toolsets, …) is checked in the same run.

    A key whose did-you-mean names a key its mapping allows, and does not have, is read as
    that key (``modle: test`` as ``model``: no follow-on "has no model"); any other is
    dropped.
    The source map gets the renamed paths too, so problems inside them point at the file.
    None when another problem is found, an unknown key sits in a union's branch (it may be
    a key of another branch), or the document still does not validate.
    """
    errors = exc.errors(include_url=False)
    if not errors or any(err["type"] != "extra_forbidden" for err in errors):
        return None
    fixed = copy.deepcopy(data)
    renamed: list[tuple[Loc, Loc]] = []
    for err in errors:
        loc = tuple(err["loc"])
        parent, key = loc[:-1], loc[-1]
        if _data_path(fixed, parent) != parent:
            return None  # a label pydantic added (a union branch): not a plain mapping
        node: Any = fixed
        for part in parent:
            node = node[part]
        if not isinstance(node, dict) or not isinstance(key, str) or key not in node:
            return None
        model = _model_at(root, parent)
        allowed = [f.alias or n for n, f in model.model_fields.items()] if model else []
        meant = close_matches(key, allowed)
        value = node.pop(key)
        if meant and meant[0] not in node:
            node[meant[0]] = value
            renamed.append(((*parent, key), (*parent, meant[0])))
    try:
        spec = root.model_validate(fixed)
    except ValidationError:
        return None
    if not renamed:
        return spec, source

    # One pass over each table, each path's prefixes looked up by the lengths renamed keys
    # have: a rename per method of 4,000 compared every path with every rename (38 s).
    moves = dict(renamed)
    sizes = sorted({len(old) for old in moves})

    def with_renamed(table: dict[Loc, T]) -> dict[Loc, T]:
        entries = dict(table)
        for loc, where in table.items():
            for size in sizes:
                new = moves.get(loc[:size]) if size <= len(loc) else None
                if new is not None:
                    entries[(*new, *loc[size:])] = where
        return entries

    aliased = dataclasses.replace(
        source,
        values=with_renamed(source.values),
        keys=with_renamed(source.keys),
        styles=with_renamed(source.styles),
    )
    return spec, aliased
