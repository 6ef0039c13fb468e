"""Rules about a whole document (not one key) are reported as positioned errors too."""

from __future__ import annotations

from openprogram_yaml.runner.cli import main


def test_instructions_and_instructions_file_together_is_an_error_not_a_traceback(
    write, capsys
) -> None:
    path = write(
        "agent.yaml",
        """
        version: 1
        name: helper
        model: test
        instructions: Be brief.
        instructions_file: system.md
        methods:
          answer: {prompt: Say hello.}
        """,
    )
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    assert "agent.yaml:1:1: error: set either 'instructions' or 'instructions_file'" in err
    assert "Traceback" not in err
