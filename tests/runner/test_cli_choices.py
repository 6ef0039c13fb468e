"""`choices` that route between methods, run through the CLI."""

from __future__ import annotations

import json

from support import EXAMPLES

from openprogram_yaml.runner.cli import main


def test_three_method_flow_and_its_path_in_json(capsys) -> None:
    code = main(
        [str(EXAMPLES / "escalation.yaml"), "assess", "-i", "ticket=Charged twice", "--json"]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    record = json.loads(captured.out)
    assert [step["method"] for step in record["path"]] == ["assess", "investigate", "draft_reply"]
    assert [step.get("choice") for step in record["path"]] == ["investigate", "reply", None]
    # The last method's answer is the run's output; its prompt saw the carried-over ticket.
    assert record["output"].startswith("test reply to: Write a short, friendly reply")
    assert "Charged twice" in record["output"]


def test_loops_are_bounded_by_max_steps(write, capsys) -> None:
    path = write(
        "loop.yaml",
        """
        version: 1
        name: loop
        model: test
        defaults: {max_steps: 3}
        methods:
          ping:
            prompt: ping
            choices: {again: {method: pong}}
          pong:
            prompt: pong
            choices: {again: {method: ping}}
        """,
    )
    code = main([str(path), "ping", "--json"])
    captured = capsys.readouterr()
    assert code == 1
    record = json.loads(captured.out)
    assert record["error"]["type"] == "DecisionError"
    assert "max_steps is 3" in record["error"]["message"]
    assert [s["method"] for s in record["path"]] == ["ping", "pong", "ping"]


def test_choice_naming_a_missing_method_is_a_positioned_error(write, capsys) -> None:
    path = write(
        "bad.yaml",
        """
        version: 1
        name: bad
        methods:
          assess:
            prompt: hi
            choices:
              go: {method: investgate}
          investigate: {prompt: look}
        """,
    )
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:7:20: error: choice 'go' continues with method 'investgate'" in err
    assert "did you mean 'investigate'?" in err
