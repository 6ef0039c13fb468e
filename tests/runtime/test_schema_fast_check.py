"""The fast schema check never calls an invalid schema valid: it agrees with jsonschema's
own metaschema check on a large seeded corpus of good and bad keyword values."""

from __future__ import annotations

import random
from typing import Any

import jsonschema

from openprogram_yaml.runtime.validation import _plainly_valid, check_schema, schema_issues

GOOD: dict[str, list[Any]] = {
    "type": ["string", "object", ["string", "null"], "integer"],
    "description": ["text"],
    "enum": [["a", "b"], [1, None], []],
    "const": [3, "x", None],
    "minimum": [0, 1.5, -3],
    "minLength": [0, 4],
    "required": [["a"], []],
    "pattern": ["^a+$"],
    "uniqueItems": [True],
    "default": [{"x": 1}],
    "multipleOf": [2, 0.5],
    "$ref": ["#/$defs/x"],
}
BAD: dict[str, list[Any]] = {
    "type": ["strin", ["string", "string"], [], 3],
    "description": [3, None],
    "enum": ["a", {"a": 1}],
    "minimum": ["0", True],
    "minLength": [-1, 1.5, "2", False],
    "required": ["a", ["a", "a"], [1]],
    "uniqueItems": ["yes", 1],
    "multipleOf": [0, -2],
    "properties": [[], "x"],
    "anyOf": [[], {}],
    "items": [3, "x"],
    "$ref": [3],
}


def meta_valid(schema: Any) -> bool:
    return not list(
        jsonschema.Draft202012Validator(jsonschema.Draft202012Validator.META_SCHEMA).iter_errors(
            schema
        )
    )


def random_schema(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    schema: dict[str, Any] = {}
    for _ in range(rng.randint(0, 4)):
        key = rng.choice([*GOOD, *BAD, "properties", "items", "anyOf", "unknownKeyword"])
        pool = BAD.get(key, []) if rng.random() < 0.3 else GOOD.get(key, [])
        if key == "properties" and (not pool or rng.random() < 0.7) and depth < 3:
            schema[key] = {"p": random_schema(rng, depth + 1)}
        elif key == "items" and (not pool or rng.random() < 0.7) and depth < 3:
            schema[key] = random_schema(rng, depth + 1)
        elif key == "anyOf" and (not pool or rng.random() < 0.7) and depth < 3:
            schema[key] = [random_schema(rng, depth + 1)]
        elif key == "unknownKeyword":
            schema[key] = "allowed by the metaschema"
        elif pool:
            schema[key] = rng.choice(pool)
    return schema


def test_fast_check_never_accepts_an_invalid_schema() -> None:
    rng = random.Random(20261130)
    fast = agreed = 0
    for _ in range(1200):
        schema = random_schema(rng)
        if _plainly_valid(schema):
            fast += 1
            assert meta_valid(schema), schema
        # Whatever path it takes, the public answer matches jsonschema's.
        assert (schema_issues(schema) == []) == meta_valid(schema), schema
        agreed += 1
    assert fast > 200  # the fast path is really taken for ordinary schemas
    assert agreed == 1200


def test_errors_still_come_with_paths_and_words() -> None:
    assert check_schema({"properties": {"a": {"type": "strin"}}}) == [
        "$.properties.a.type: 'strin' is not one of "
        "['array', 'boolean', 'integer', 'null', 'number', 'object', 'string']"
    ]
