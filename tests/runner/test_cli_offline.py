"""The command line, run as users run it, against the offline `test` model."""

from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pytest
from support import EXAMPLES

from openprogram_yaml.runner.cli import main

TRIAGE = str(EXAMPLES / "triage.yaml")
LABEL_SCHEMA = json.loads((EXAMPLES / "schemas" / "label.json").read_text())


def test_example_answers_offline_with_schema_valid_json(capsys) -> None:
    code = main([TRIAGE, "classify", "-i", "ticket=I was charged twice for March"])
    out = capsys.readouterr().out
    assert code == 0
    jsonschema.validate(json.loads(out), LABEL_SCHEMA)


def test_json_output_has_the_record_fields(capsys) -> None:
    code = main(
        [TRIAGE, "draft_reply", "-i", "ticket=The app crashes", "-i", "category=bug", "--json"]
    )
    record = json.loads(capsys.readouterr().out)
    assert code == 0
    assert record["agent"] == "triage"
    assert record["method"] == "draft_reply"
    assert record["model"] == "test"
    assert isinstance(record["output"], str) and record["output"]
    assert set(record["usage"]) >= {"input_tokens", "output_tokens", "total_tokens"}
    assert len(record["version"]["hash"]) == 16
    assert record["status"] == "ok"
    # This checkout is a git repository: the record names the commit and whether the
    # files the run used differ from it.
    if "commit" in record["version"]:
        assert len(record["version"]["commit"]) == 40
        assert isinstance(record["version"]["dirty"], bool)


def test_same_inputs_same_answer(capsys) -> None:
    args = [TRIAGE, "extract", "-i", "ticket=Order 1234 never arrived", "--json"]
    main(args)
    first = json.loads(capsys.readouterr().out)["output"]
    main(args)
    assert json.loads(capsys.readouterr().out)["output"] == first


def test_input_json_from_a_file(tmp_path, capsys) -> None:
    inputs = tmp_path / "in.json"
    inputs.write_text(json.dumps({"ticket": "Cannot log in", "tone": "formal"}))
    assert main([TRIAGE, "draft_reply", "--input-json", f"@{inputs}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["method"] == "draft_reply"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"ticket": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested deeper than"),
        ('{"ticket": ' + "7" * 5_000 + "}", "a number has more digits than"),
    ],
)
def test_input_json_the_decoder_cannot_read_is_a_usage_error(tmp_path, capsys, text, said) -> None:
    # Both were tracebacks (a RecursionError, a ValueError from int()) with exit 1.
    inputs = tmp_path / "in.json"
    inputs.write_text(text)
    assert main([TRIAGE, "classify", "--input-json", f"@{inputs}"]) == 2
    assert f"--input-json is not valid JSON: {said}" in capsys.readouterr().err


def test_missing_input_exits_2(capsys) -> None:
    assert main([TRIAGE, "classify"]) == 2
    assert "'ticket' is a required property" in capsys.readouterr().err


def test_check_reports_ok(capsys) -> None:
    assert main(["check", TRIAGE]) == 0
    assert capsys.readouterr().out.strip() == "ok: 1 agent, 3 methods checked"


def test_console_script_runs_as_a_process() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "openprogram_yaml",
            TRIAGE,
            "classify",
            "-i",
            "ticket=hello",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["model"] == "test"


def test_usage_error_without_traceback() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "openprogram_yaml", TRIAGE, "classify", "-i", "oops"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "write -i NAME=VALUE" in proc.stderr
    assert "Traceback" not in proc.stderr
