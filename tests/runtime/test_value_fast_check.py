"""Values are checked first by the compiled ``jsonschema_rs`` validator, whose "valid" alone
is trusted: on a seeded corpus of schemas and values every answer, and every error, is
jsonschema's own; values it cannot take and schemas it cannot build go to jsonschema; a
remote ``$ref`` is never fetched."""

from __future__ import annotations

import datetime
import http.server
import json
import pickle
import random
import threading
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

from openprogram_yaml.runtime.validation import SchemaValidator, format_path

SUBSCHEMAS: list[dict[str, Any]] = [
    {"type": "string"},
    {"type": "integer", "minimum": 0},
    {"type": "number", "exclusiveMaximum": 10},
    {"type": "string", "enum": ["a", "b"]},
    {"type": "string", "minLength": 2, "pattern": "^[a-z]+$"},
    {"type": ["string", "null"]},
    {"type": "array", "items": {"type": "integer"}, "maxItems": 2},
    {"type": "array", "uniqueItems": True},
    {"const": 3},
    {"anyOf": [{"type": "string"}, {"type": "boolean"}]},
    {"oneOf": [{"type": "integer"}, {"type": "number"}]},
    {"not": {"type": "null"}},
    {"type": "integer", "multipleOf": 3},
]
VALUES: list[Any] = [
    "a", "b", "abc", "A1", "", None, 0, -1, 3, 9.5, 10, 12, 1.0, True, False,
    [], [1, 2], [1, 1], [1, 2, 3], ["x"], {}, {"a": 1},
]  # fmt: skip


def random_schema(rng: random.Random) -> dict[str, Any]:
    names = rng.sample(["a", "b", "c"], rng.randint(0, 3))
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {name: rng.choice(SUBSCHEMAS) for name in names},
    }
    if names and rng.random() < 0.6:
        schema["required"] = rng.sample(names, rng.randint(1, len(names)))
    if rng.random() < 0.4:
        schema["additionalProperties"] = False
    return schema


def random_value(rng: random.Random) -> dict[str, Any]:
    return {
        name: rng.choice(VALUES) for name in rng.sample(["a", "b", "c", "d"], rng.randint(0, 4))
    }


def reference_errors(schema: dict[str, Any], value: Any) -> list[str]:
    """``SchemaValidator.errors`` as jsonschema alone words them."""
    found = sorted(
        jsonschema.Draft202012Validator(schema).iter_errors(value), key=lambda e: list(e.path)
    )
    return [f"{format_path(e.path)}: {e.message}" for e in found][:20]


def test_the_compiled_check_agrees_with_jsonschema_on_a_seeded_corpus() -> None:
    rng = random.Random(20261201)
    valid = invalid = 0
    for _ in range(600):
        schema = random_schema(rng)
        validator = SchemaValidator(schema)
        for _ in range(5):
            value = random_value(rng)
            expected = reference_errors(schema, value)
            assert validator.errors(value) == expected, (schema, value)
            assert validator.is_valid(value) == (not expected)
            # Only a "valid" is trusted, so it must never say so of an invalid value.
            if validator._passes(value):
                assert not expected, (schema, value)
            valid += not expected
            invalid += bool(expected)
    assert valid > 500 and invalid > 500  # both answers really come up


def test_an_ordinary_valid_value_takes_the_compiled_path() -> None:
    validator = SchemaValidator({"type": "object", "properties": {"label": {"enum": ["x"]}}})
    assert validator._passes({"label": "x"})
    assert validator.errors({"label": "x"}) == []
    assert not validator._passes({"label": "y"})
    assert validator.errors({"label": "y"}) == ["$.label: 'y' is not one of ['x']"]
    assert validator.rule_errors({"label": "y"}) == ['$.label: must be one of ["x"]']


def test_a_value_the_compiled_check_cannot_take_goes_to_jsonschema() -> None:
    # Not JSON (a date): jsonschema_rs refuses it; jsonschema's answer stands.
    value: Any = {"when": datetime.date(2026, 1, 1)}
    validator = SchemaValidator({"type": "object"})
    assert validator.errors(value) == []
    strict = SchemaValidator({"type": "object", "properties": {"when": {"type": "string"}}})
    assert strict.errors(value) == ["$.when: datetime.date(2026, 1, 1) is not of type 'string'"]


def test_an_unresolvable_reference_still_reads_as_before() -> None:
    validator = SchemaValidator({"$ref": "#/$defs/missing"})
    assert validator._passes(1) is False
    assert validator.errors(1)[0].startswith("$: the schema could not be applied:")
    assert validator.rule_errors(1) == ["$: the schema could not be applied to the value"]


def test_formats_are_not_asserted_as_jsonschema_does_not() -> None:
    validator = SchemaValidator({"type": "string", "format": "email"})
    assert validator.errors("not an address") == []


def test_a_pickled_validator_checks_the_same() -> None:
    validator = SchemaValidator({"type": "integer"})
    assert validator.errors(1) == []
    copy = pickle.loads(pickle.dumps(validator))
    assert copy.errors(1) == [] and copy.errors("x") == ["$: 'x' is not of type 'integer'"]


@pytest.fixture
def counting_server() -> Iterator[tuple[str, list[str]]]:
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            body = b'{"type": "string"}'
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/s.json", hits
    finally:
        server.shutdown()
        server.server_close()


def test_a_remote_reference_is_never_fetched(counting_server: tuple[str, list[str]]) -> None:
    url, hits = counting_server
    validator = SchemaValidator({"properties": {"a": {"$ref": url}}})
    assert validator._passes({"a": 1}) is False
    assert validator.errors({"a": 1})[0].startswith("$: the schema could not be applied:")
    assert hits == []


# Where jsonschema_rs says "valid" and jsonschema does not: its regex engine reads \D, \W, \S
# and [^\d] as ASCII classes (Python's re as Unicode), it checks multipleOf by exact decimal
# division (jsonschema by float division), and it takes a tuple as an array. None of those
# answers may be trusted, so the value goes to jsonschema, as before the compiled check.
@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"type": "string", "pattern": "^\\D$"}, "\u0661"),
        ({"type": "string", "pattern": "^\\W$"}, "\u00e9"),
        ({"type": "string", "pattern": "^\\S$"}, "\x1c"),
        ({"type": "string", "pattern": "^\\s$"}, "\ufeff"),
        ({"type": "object", "patternProperties": {"^\\d$": {"type": "integer"}}}, {"\u0661": "x"}),
        ({"type": "object", "propertyNames": {"pattern": "^[^\\d]$"}}, {"\u0661": 1}),
        ({"type": "number", "multipleOf": 0.1}, 0.3),
        ({"$defs": {"price": {"multipleOf": 0.01}}, "$ref": "#/$defs/price"}, 0.07),
        ({"type": "array"}, (1, 2)),
        ({"type": "object", "properties": {"tags": {"type": "array"}}}, {"tags": ("a",)}),
        ({"const": [1, 2]}, [1, (2,)]),
        # Where it is stricter, under not: a wrong "valid" too.
        ({"not": {"dependencies": {"a": ["b"]}}}, {"a": 1}),
        (
            {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "not": {"contentMediaType": "application/json"},
            },
            "{not json",
        ),
        ({"not": {"type": "number", "minimum": 0}}, json.loads("Infinity")),
        ({"not": {"type": "string", "pattern": "^\\d$"}}, "\u0661"),
    ],
)
def test_a_value_jsonschema_rejects_is_never_passed_by_the_compiled_check(
    schema: dict[str, Any], value: Any
) -> None:
    validator = SchemaValidator(schema)
    expected = reference_errors(schema, value)
    assert expected, "jsonschema rejects it"
    assert validator.errors(value) == expected
    assert not validator.is_valid(value)
    assert validator.rule_errors(value)
