"""The JSON Schemas of the YAML formats, generated from the spec models (for editors)."""

from __future__ import annotations

import ast
import inspect
import itertools
import typing
from typing import Any

from pydantic import BaseModel

from . import models
from .models import AgentSpec, ProjectSpec, TestFileSpec

__all__ = [
    "SCHEMA_FILES",
    "agent_json_schema",
    "json_schema",
    "project_json_schema",
    "tests_json_schema",
]

#: Which document each checked-in schema file describes.
SCHEMA_FILES = {
    "agent": "agent.schema.json",
    "project": "project.schema.json",
    "tests": "tests.schema.json",
}


def _field_docs() -> dict[str, dict[str, str]]:
    """Field docstrings of the spec models, by class name then field name.

    Read from the source of ``models.py`` (the string right after a field's annotation),
    so the models themselves need not keep them at run time.
    """
    tree = ast.parse(inspect.getsource(models))
    docs: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        fields: dict[str, str] = {}
        body = node.body
        for stmt, following in itertools.pairwise(body):
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                fields[stmt.target.id] = inspect.cleandoc(following.value.value)
        docs[node.name] = fields
    return docs


def _describe(
    schema: dict[str, Any], model: type[BaseModel], docs: dict[str, dict[str, str]]
) -> None:
    """Put each field's docstring into ``schema`` as its description."""
    properties = schema.get("properties", {})
    for name, info in model.model_fields.items():
        key = info.alias or name
        for cls in model.__mro__:
            doc = docs.get(cls.__name__, {}).get(name)
            if doc is not None and key in properties:
                properties[key]["description"] = doc
                break


def _without_null_defaults(schema: dict[str, Any]) -> None:
    """Optional fields as their real type: a field whose default is None is written
    ``anyOf: [{type: string}, {type: null}], default: null`` by pydantic, which editors
    complete as "string or null". Leaving the field out is how a file says "unset", so the
    schema says ``type: string`` alone. (A null *inside* a value, such as a test's
    ``answers: [yes, null]``, is a value of its own and stays.)"""
    for name, prop in schema.get("properties", {}).items():
        options = prop.get("anyOf")
        if "default" not in prop or prop["default"] is not None or not isinstance(options, list):
            continue
        rest = [o for o in options if o != {"type": "null"}]
        if len(rest) == len(options):
            continue
        del prop["default"]
        del prop["anyOf"]
        if len(rest) == 1:
            prop.update({k: v for k, v in rest[0].items() if k not in prop})
        else:
            prop["anyOf"] = rest
        schema["properties"][name] = prop


def _models_in(model: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """Every spec model reachable from ``model``, by name."""
    found: dict[str, type[BaseModel]] = {}
    pending: list[Any] = [model]
    while pending:
        item = pending.pop()
        if isinstance(item, type) and issubclass(item, BaseModel):
            if item.__name__ in found:
                continue
            found[item.__name__] = item
            pending.extend(f.annotation for f in item.model_fields.values())
        else:
            pending.extend(typing.get_args(item))
    return found


def _schema(model: type[BaseModel], title: str) -> dict[str, Any]:
    schema = model.model_json_schema()
    docs = _field_docs()
    models = _models_in(model)
    _describe(schema, model, docs)
    for name, sub in schema.get("$defs", {}).items():
        if name in models:
            _describe(sub, models[name], docs)
    for sub in [schema, *schema.get("$defs", {}).values()]:
        _without_null_defaults(sub)
    schema.pop("title", None)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title, **schema}


def agent_json_schema() -> dict[str, Any]:
    """The schema of an agent file, as checked in at ``schemas/agent.schema.json``."""
    return _schema(AgentSpec, "openprogram_yaml agent file")


def project_json_schema() -> dict[str, Any]:
    """The schema of ``openprogram.yaml``, as checked in at ``schemas/project.schema.json``."""
    return _schema(ProjectSpec, "openprogram_yaml project file (openprogram.yaml)")


def tests_json_schema() -> dict[str, Any]:
    """The schema of a repository's test files, as checked in at ``schemas/tests.schema.json``."""
    return _schema(TestFileSpec, "openprogram_yaml test file")


def json_schema(kind: str) -> dict[str, Any]:
    """The schema of ``kind``: "agent", "project" or "tests"."""
    return {"agent": agent_json_schema, "project": project_json_schema, "tests": tests_json_schema}[
        kind
    ]()
