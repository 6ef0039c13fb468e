"""``Method.prepare_inputs``'s shortcuts give what the general path gives: a method with no
inputs skips the schema check, and the file inputs are worked out once per method."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pytest

from openprogram_yaml.compile.program import _NO_INPUTS_SCHEMA, Method, unfit_input
from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.errors import InputValidationError
from openprogram_yaml.json_types import JSONValue
from openprogram_yaml.runtime.content import media_types
from openprogram_yaml.runtime.validation import SchemaValidator

AGENT = """\
version: 1
name: desk
model: test
methods:
  bare: {prompt: "hello"}
  optional: {inputs: {who: {type: string, default: you}}, prompt: "hi {{ who }}"}
  needs: {inputs: {who: {type: string}}, prompt: "hi {{ who }}"}
  photo:
    inputs:
      caption: {type: string}
      picture: {type: string, contentMediaType: image/png}
    prompt: "{{ caption }} {{ picture }}"
"""

PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def _methods(write: Any) -> dict[str, Method]:
    program = compile_path(write("desk.yaml", AGENT))
    agent = program.agent("desk")
    return {name: agent.method(name) for name in ("bare", "optional", "needs", "photo")}


def _general(method: Method, given: dict[str, Any]) -> list[str]:
    """The check the shortcut stands in for: the validator on the inputs with defaults."""
    values = dict(given)
    for name, schema in method.inputs.items():
        if name not in values and isinstance(schema, dict) and "default" in schema:
            values[name] = schema["default"]
    return method.input_validator.errors(values)


def test_a_method_without_inputs_has_the_schema_the_shortcut_knows(write: Any) -> None:
    bare = _methods(write)["bare"]
    assert dict(bare.input_schema) == _NO_INPUTS_SCHEMA
    assert bare.prepare_inputs({}) == {} and _general(bare, {}) == []
    with pytest.raises(InputValidationError, match="unknown inputs"):
        bare.prepare_inputs({"who": "x"})


def test_unknown_inputs_are_named_up_to_a_bound_and_long_ones_cut_short(write: Any) -> None:
    # 900,000 unknown names (14 MB of a served body) were each looked up for a "did you
    # mean" (5 s of the event loop) and all named in the error (a 12 MB reply).
    optional = _methods(write)["optional"]
    given = {f"x{n}": 1 for n in range(100_000)} | {"w" * 1_000_000: 1}
    with pytest.raises(InputValidationError) as failed:
        optional.prepare_inputs(given)
    issues = failed.value.issues
    assert len(issues) == 20 and issues[-1] == "and 99,982 more unknown inputs"
    assert issues[0] == "unknown input 'x0'"
    with pytest.raises(InputValidationError) as failed:
        optional.prepare_inputs({"w" * 1_000_000: 1, "wha": 2})
    assert failed.value.issues == [
        "unknown input '" + "w" * 77 + "...'",
        "unknown input 'wha'; did you mean 'who'?",
    ]


@pytest.mark.parametrize(
    ("name", "given"),
    [
        ("bare", {}),
        ("optional", {}),
        ("optional", {"who": "me"}),
        ("optional", {"who": 3}),
        ("needs", {}),
        ("needs", {"who": "me"}),
        ("needs", {"who": None}),
    ],
)
def test_prepare_inputs_fails_exactly_when_the_validator_does(
    write: Any, name: str, given: dict[str, Any]
) -> None:
    method = _methods(write)[name]
    expected = _general(method, given)
    try:
        method.prepare_inputs(given)
    except InputValidationError as exc:
        assert expected and exc.issues == expected
    else:
        assert expected == []


def test_the_shortcut_needs_the_empty_schema_itself(write: Any) -> None:
    # A method built by hand with no inputs but a schema that wants one is checked.
    wanting: dict[str, JSONValue] = {"type": "object", "required": ["who"], "properties": {}}
    bare = dataclasses.replace(
        _methods(write)["bare"], input_schema=wanting, input_validator=SchemaValidator(wanting)
    )
    with pytest.raises(InputValidationError):
        bare.prepare_inputs({})


def test_the_file_inputs_are_worked_out_once_and_as_before(write: Any, tmp_path: Path) -> None:
    methods = _methods(write)
    for method in methods.values():
        fresh = tuple(
            (name, accepted)
            for name, schema in method.inputs.items()
            if (accepted := media_types(schema)) is not None
        )
        assert method._file_inputs() == fresh
        assert method._file_inputs() is method._file_inputs()
    photo = methods["photo"]
    assert [name for name, _ in photo._file_inputs()] == ["picture"]
    for _ in range(2):  # the kept list serves the inputs' check and the render alike
        values = photo.prepare_inputs({"caption": "look", "picture": PNG})
        blocks = photo.render(values)
        assert any(block.get("type") == "image" for block in blocks), blocks
    copy = dataclasses.replace(photo, inputs={"caption": {"type": "string"}})
    assert copy._file_inputs() == ()  # a changed copy works its own out


def test_an_input_nested_past_the_recursion_limit_is_checked_without_recursion() -> None:
    # A Python caller's input may nest deeper than the interpreter's limit: the check
    # of every run's inputs raised RecursionError walking it.
    deep: list[JSONValue] = []
    inner = deep
    for _ in range(2 * sys.getrecursionlimit()):
        inner.append([])
        inner = inner[0]  # type: ignore[assignment]
    assert unfit_input(deep, "x") is None
    inner.append(float("nan"))
    problem = unfit_input(deep, "x")
    assert problem is not None and problem.endswith("[0][0]: nan is not a JSON number")


def test_the_first_unfit_value_is_named_by_its_path() -> None:
    value: JSONValue = {"a": [1, {"b": "ok", "c\ud800": 2}], "d": float("inf")}
    assert unfit_input(value, "x") == (
        "x.a[1] (a key): text that is not valid Unicode (character 2 is a lone surrogate: "
        "a byte that is not UTF-8, or half of a UTF-16 pair)"
    )
    assert (
        unfit_input({"a": [1, 2.5], "d": [float("inf")]}, "x") == "x.d[0]: inf is not a JSON number"
    )
