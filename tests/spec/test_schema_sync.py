"""schemas/ is generated from the spec models and must not drift from them."""

from __future__ import annotations

import json

import jsonschema
import yaml
from support import EXAMPLES, REPO

from openprogram_yaml.spec.schema import agent_json_schema

SCHEMA_FILE = REPO / "schemas" / "agent.schema.json"


def test_checked_in_schema_matches_the_models() -> None:
    on_disk = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    assert on_disk == agent_json_schema(), (
        "schemas/agent.schema.json is stale: "
        "run `openprogram-run schema > schemas/agent.schema.json`"
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
