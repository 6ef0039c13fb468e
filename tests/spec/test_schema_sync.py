"""schemas/ is generated from the spec models and must not drift from them."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml
from support import EXAMPLES, REPO

from openprogram_yaml.spec.schema import SCHEMA_FILES, agent_json_schema, json_schema

SCHEMA_FILE = REPO / "schemas" / "agent.schema.json"


@pytest.mark.parametrize("kind", sorted(SCHEMA_FILES))
def test_checked_in_schemas_match_the_models(kind: str) -> None:
    name = SCHEMA_FILES[kind]
    on_disk = json.loads((REPO / "schemas" / name).read_text(encoding="utf-8"))
    assert on_disk == json_schema(kind), (
        f"schemas/{name} is stale: run `openprogram-run schema {kind} > schemas/{name}`"
    )


def test_schema_describes_fields_for_editors() -> None:
    schema = agent_json_schema()
    method = schema["$defs"]["MethodSpec"]
    assert method["additionalProperties"] is False
    assert "Jinja2" in method["properties"]["prompt"]["description"]


def test_examples_validate_against_the_schema_and_name_it() -> None:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    for path in sorted(EXAMPLES.glob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        assert text.startswith("# yaml-language-server: $schema="), path
        jsonschema.validate(yaml.safe_load(text), schema)


@pytest.mark.parametrize("kind", sorted(SCHEMA_FILES))
def test_optional_fields_are_described_by_their_real_type(kind: str) -> None:
    """Editors complete an optional field as its type, not as "X or null"."""
    schema = json_schema(kind)
    for sub in [schema, *schema["$defs"].values()]:
        for name, prop in sub.get("properties", {}).items():
            assert {"type": "null"} not in prop.get("anyOf", []), name
    model = schema["$defs"]["MethodSpec"] if kind == "agent" else None
    if model is not None:
        assert model["properties"]["description"]["type"] == "string"
