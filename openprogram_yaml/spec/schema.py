"""The JSON Schemas of the YAML formats, generated from the spec models (for editors)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

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


def _schema(model: type[BaseModel], title: str) -> dict[str, Any]:
    schema = model.model_json_schema()
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
