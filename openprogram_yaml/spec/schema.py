"""The JSON Schema of the YAML format, generated from the spec models (for editors)."""

from __future__ import annotations

from typing import Any

from .models import AgentSpec

__all__ = ["agent_json_schema"]


def agent_json_schema() -> dict[str, Any]:
    """The schema of an agent file, as checked in at ``schemas/agent.schema.json``."""
    schema = AgentSpec.model_json_schema()
    schema.pop("title", None)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "openprogram_yaml agent file",
        **schema,
    }
