"""``--json`` output never carries a character that drives a terminal (the C1 controls:
U+009B is a CSI) or reorders what a reader sees (the bidi controls): they are written as
``\\uXXXX`` escapes, the JSON value unchanged and other non-ASCII text readable."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from openprogram_yaml.runner.cli import main
from openprogram_yaml.runner.json_text import safe_json_text

AGENT = """\
version: 1
name: tagger
model: test
methods:
  tag:
    inputs:
      ticket: {type: string}
    prompt: "Tag: {{ ticket }}"
"""

#: The ``write`` fixture: a file under tmp_path, its path.
Write = Callable[[str, str], Path]

#: Every character escaped, then readable text that is not.
CONTROLS = "".join(map(chr, range(0x80, 0xA0))) + "\u202a\u202b\u202c\u202d\u202e"
CONTROLS += "\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
READABLE = "café ü 日本 \u00a0 \u2028"


def _raw_controls(text: str) -> list[str]:
    return [c for c in text if c in CONTROLS]


def test_the_helper_escapes_exactly_the_controls_and_keeps_the_value() -> None:
    value = {"k" + CONTROLS: CONTROLS + READABLE, "list": [READABLE, "\x1b[2J"]}
    text = safe_json_text(json.dumps(value, ensure_ascii=False))
    assert _raw_controls(text) == []
    assert "\\u009b" in text and "\\u202e" in text and "\\u061c" in text
    assert READABLE in text  # other non-ASCII stays as it is
    assert json.loads(text) == value
    assert safe_json_text('{"a": 1}') == '{"a": 1}'


def test_run_json_escapes_controls_from_the_inputs_and_the_output(
    write: Write, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = write("agent.yaml", AGENT)
    ticket = "a\u009b2J" + CONTROLS + READABLE
    code = main([str(agent), "tag", "-i", f"ticket={ticket}", "--json"])
    out = capsys.readouterr().out
    assert code == 0
    assert _raw_controls(out) == []
    assert READABLE in out
    record = json.loads(out)
    assert record["inputs"] == {"ticket": ticket}
    assert ticket in record["output"]


def test_batch_json_escapes_controls_in_its_summary(
    write: Write, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = write("agent.yaml", AGENT)
    rows = write("in.jsonl", '{"ticket": "one"}\n')
    out = tmp_path / ("out\u009b2J\u202e-café.jsonl")
    code = main(["batch", str(agent), "tag", "--input", str(rows), "--output", str(out), "--json"])
    printed = capsys.readouterr().out
    assert code == 0
    assert _raw_controls(printed) == []
    assert "café" in printed
    summary = json.loads(printed)
    assert summary["output"] == str(out) and summary["ok"] == 1


@pytest.mark.parametrize("command", ["run", "batch"])
def test_a_usage_error_quoting_a_name_shows_its_controls_as_text(
    command: str, write: Write, capsys: pytest.CaptureFixture[str]
) -> None:
    # run and batch select the method in one place (cli.select_method); its errors quote
    # the name they were given, and an OSC 52 (clipboard write) in it reached the terminal.
    agent = write("agent.yaml", AGENT)
    name = "tag\x1b]52;c;aGk=\x07"
    argv = [str(agent), name] if command == "run" else ["batch", str(agent), name]
    if command == "batch":
        argv += ["--input", str(write("rows.jsonl", '{"ticket": "x"}\n')), "--output", "o.jsonl"]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2
    assert "\x1b" not in err and "\x07" not in err
    assert "tag\\x1b]52;c;aGk=\\x07" in err
