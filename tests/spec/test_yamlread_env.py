"""Reading YAML safely with positions, and ${env:…} expansion."""

from __future__ import annotations

import pytest

from openprogram_yaml.errors import ConfigError
from openprogram_yaml.spec.env import expand_env
from openprogram_yaml.spec.yamlread import load_yaml_text


def load(text: str):  # type: ignore[no-untyped-def]
    return next(load_yaml_text(text, "f.yaml"))


def test_positions_of_values_and_keys() -> None:
    doc = load("a: 1\nb:\n  c: [x, y]\n")
    assert str(doc.source.at(("b", "c", 1))) == "f.yaml:3:10"
    assert str(doc.source.at(("b", "c"), key=True)) == "f.yaml:3:3"
    # An unknown path falls back to its nearest known parent.
    assert str(doc.source.at(("b", "zzz"))) == "f.yaml:3:3"


def test_yaml_12_booleans_and_no_timestamps() -> None:
    doc = load("a: [yes, no, on, NO, true, False, 2024-01-02]\n")
    assert doc.data["a"] == ["yes", "no", "on", "NO", True, False, "2024-01-02"]


def test_duplicate_keys_are_errors() -> None:
    with pytest.raises(ConfigError) as info:
        load("a: 1\nb: 2\na: 3\n")
    assert (
        str(info.value)
        == "f.yaml:3:1: error: duplicate key 'a' (first at line 1); remove one of them"
    )


def test_alias_bomb_is_bounded() -> None:
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]")
    with pytest.raises(ConfigError) as info:
        load("\n".join(lines) + "\n")
    assert "expands to more than 100,000 nodes" in str(info.value)


def test_small_aliases_still_work() -> None:
    doc = load("base: &b {type: string}\nx: *b\ny: *b\n")
    assert doc.data["x"] == doc.data["y"] == {"type": "string"}


def test_unsafe_tags_are_refused() -> None:
    with pytest.raises(ConfigError) as info:
        load("a: !!python/object/apply:os.system ['echo hi']\n")
    assert "f.yaml:1:4" in str(info.value)


def test_env_expansion_defaults_escapes_and_secrets() -> None:
    doc = load(
        "model: ${env:MODEL:-test}\n"
        "key: ${env:SHOP_TOKEN}\n"
        "literal: $${env:NOT_EXPANDED}\n"
        "mixed: a-${env:PART}-b\n"
    )
    env = {"SHOP_TOKEN": "tok-123456", "PART": "mid"}
    out = expand_env(doc.data, doc.source, env)
    assert out.diagnostics == []
    assert out.data == {
        "model": "test",
        "key": "tok-123456",
        "literal": "${env:NOT_EXPANDED}",
        "mixed": "a-mid-b",
    }
    assert out.secrets == {"tok-123456"}  # PART is not secret-looking; defaults never are


def test_bare_dollar_brace_is_refused_with_the_fix() -> None:
    doc = load("a:\n  b: ${OPENAI_KEY}\n")
    out = expand_env(doc.data, doc.source, {})
    [diag] = out.diagnostics
    assert (diag.line, diag.col) == (2, 6)
    assert "write '${env:OPENAI_KEY}'" in diag.message and "'$${OPENAI_KEY}'" in diag.message


def test_env_references_spelled_with_escapes_are_expanded_too() -> None:
    # The text holds no "${": the double-quoted escapes spell it.
    doc = load('a: "\\x24{env:HOME}"\nb: "\\u0024{env:HOME}"\nc: plain\n')
    out = expand_env(doc.data, doc.source, {"HOME": "/home/me"})
    assert out.data == {"a": "/home/me", "b": "/home/me", "c": "plain"}
    assert out.names == {"HOME"}


def test_a_file_without_references_is_left_as_read() -> None:
    doc = load("a: plain $ text {x}\nb: [1, '$', {c: '{'}]\n")
    out = expand_env(doc.data, doc.source, {})
    assert out.data == {"a": "plain $ text {x}", "b": [1, "$", {"c": "{"}]}
    assert not out.diagnostics and not out.names and not out.secrets
