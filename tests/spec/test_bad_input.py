"""Every kind of bad input gets the right position, a message that says what to do, exit 2."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.errors import ConfigError
from openprogram_yaml.runner.cli import main


def diagnostics(path: Path) -> list[tuple[int, int, str]]:
    with pytest.raises(ConfigError) as info:
        compile_path(path)
    return [(d.line, d.col, d.message) for d in info.value.diagnostics]


def one(path: Path) -> tuple[int, int, str]:
    found = diagnostics(path)
    assert len(found) == 1, found
    return found[0]


def test_typod_key_points_at_the_key_with_a_hint(write) -> None:
    path = write(
        "a.yaml",
        """
        version: 1
        name: a
        model: test
        methods:
          classify:
            promt: "Label {{ ticket }}"
            inputs: {ticket: {type: string}}
        """,
    )
    line, col, msg = one(path)
    assert (line, col) == (6, 5)
    assert "unknown key 'promt' in method 'classify'; did you mean 'prompt'?" in msg


def test_wrong_type_points_at_the_value(write) -> None:
    path = write(
        "a.yaml",
        """
        version: 1
        name: a
        defaults:
          timeout_s: soon
        methods:
          m: {prompt: hi}
        """,
    )
    assert one(path) == (4, 14, "'defaults.timeout_s': expected a number, got 'soon'")


def test_missing_required_field(write) -> None:
    path = write(
        "a.yaml",
        """
        version: 1
        methods:
          m: {prompt: hi}
        """,
    )
    line, col, msg = one(path)
    assert (line, col) == (1, 1)
    assert "missing required key 'name'" in msg


def test_method_without_prompt_says_what_to_add(write) -> None:
    path = write(
        "a.yaml",
        """
        version: 1
        name: a
        methods:
          m:
            description: nothing to say
        """,
    )
    line, col, msg = one(path)
    assert (line, col) == (5, 5)
    assert "needs a 'prompt'" in msg


def test_undefined_template_variable_at_its_position(write) -> None:
    path = write(
        "a.yaml",
        """
        version: 1
        name: a
        model: test
        methods:
          classify:
            inputs: {ticket: {type: string}}
            prompt: |
              Ticket:
              {{ tickt }}
        """,
    )
    line, col, msg = one(path)
    assert (line, col) == (9, 10)
    assert "'tickt'" in msg and "did you mean 'ticket'" in msg


def test_unset_env_without_default_names_the_field(write, monkeypatch) -> None:
    monkeypatch.delenv("NO_SUCH_MODEL_VAR", raising=False)
    path = write(
        "a.yaml",
        """
        version: 1
        name: a
        model: ${env:NO_SUCH_MODEL_VAR}
        methods:
          m: {prompt: hi}
        """,
    )
    line, col, msg = one(path)
    assert (line, col) == (3, 8)
    assert "NO_SUCH_MODEL_VAR is not set" in msg and "'model'" in msg
    assert "${env:NO_SUCH_MODEL_VAR:-value}" in msg


def test_invalid_yaml(write) -> None:
    path = write(
        "a.yaml",
        """
        version: 1
        name: a
        methods:
          m: {prompt: hi
        """,
    )
    line, col, msg = one(path)
    assert line == 5 and col == 1
    assert msg.startswith("invalid YAML")


def test_response_schema_that_is_not_a_json_schema(write) -> None:
    path = write(
        "a.yaml",
        """
        version: 1
        name: a
        model: test
        methods:
          m:
            prompt: hi
            response_schema:
              type: objekt
        """,
    )
    line, col, msg = one(path)
    assert (line, col) == (8, 13)
    assert "invalid JSON Schema" in msg and "'objekt'" in msg


def test_a_comma_in_unquoted_schema_text_is_caught_at_the_stray_key(write) -> None:
    path = write(
        "a.yaml",
        """
        version: 1
        name: a
        model: test
        methods:
          m:
            prompt: hi
            response_schema:
              type: object
              properties:
                asks: {type: string, description: What they want, in one sentence}
        """,
    )
    line, col, msg = one(path)
    assert (line, col) == (10, 59)
    assert msg.startswith("'in one sentence' has no value: in a {...} mapping a comma ends")
    assert msg.endswith('put text holding a comma in quotes ("What they want, in one sentence")')


def test_a_comma_in_unquoted_text_is_caught_in_any_flow_mapping(write) -> None:
    path = write(
        "a.yaml",
        """
        version: 1
        name: a
        model: test
        vars: {product: Acme, Inc, region: EU, empty: }
        methods:
          m:
            prompt: "{{ product }} in {{ region }}"
        """,
    )
    line, col, msg = one(path)
    assert (line, col) == (4, 23)
    assert msg.startswith("'Inc' has no value: in a {...} mapping a comma ends unquoted text")
    assert msg.endswith('put text holding a comma in quotes ("Acme, Inc")')


def test_a_misspelt_schema_keyword_gets_a_hint_and_extensions_pass(write) -> None:
    path = write(
        "a.yaml",
        """
        version: 1
        name: a
        model: test
        methods:
          m:
            prompt: hi
            response_schema:
              type: object
              x-owner: billing
              nullable: true
              requried: [a]
              properties: {a: {type: string}}
        """,
    )
    assert one(path) == (11, 7, "unknown keyword 'requried'; did you mean 'required'?")


def test_all_problems_of_a_file_in_one_run(write) -> None:
    path = write(
        "a.yaml",
        """
        version: 1
        name: a
        modle: test
        methods:
          a: {prompt: "{{ x }}"}
          b: {prompt: hi, timeout_s: -1}
        """,
    )
    found = diagnostics(path)
    assert [(line, col) for line, col, _ in found] == [(3, 1), (5, 19), (6, 30)]


def test_a_duplicate_key_or_a_stray_comma_hides_no_other_problem(write) -> None:
    # The YAML is readable around them (the first value kept, the stray key dropped), so
    # the rest of the file is checked in the same run, not after they are fixed.
    path = write(
        "a.yaml",
        """
        version: 1
        name: a
        model: test
        model: test
        instructons: hi
        methods:
          m:
            inputs: {who: {type: string, description: Who asks, and why}}
            prompt: "{{ who }} {{ y }}"
        """,
    )
    found = diagnostics(path)
    assert [(line, col) for line, col, _ in found] == [(4, 1), (5, 1), (8, 57), (9, 27)]
    assert found[0][2] == "duplicate key 'model' (first at line 3); remove one of them"
    assert found[1][2].startswith("unknown key 'instructons'; did you mean 'instructions'?")
    assert found[2][2].startswith("'and why' has no value: in a {...} mapping")
    assert found[3][2].startswith("template reads 'y', which the method does not declare")


def test_an_unknown_key_hides_no_other_problem(write) -> None:
    # The file is checked as if the unknown keys were not there, a misspelt one read as
    # the key it is close to (so 'modle' leaves no "has no model" behind): its templates,
    # tools and toolsets are checked in the same run.
    path = write(
        "a.yaml",
        """
        version: 1
        name: a
        modle: test
        x_owner: billing
        instructons: "{{ nope }}"
        tools:
          t: {python: "nosuchmodule:fn"}
        methods:
          m:
            promt: "{{ y }}"
            toolset: bad
        """,
    )
    found = diagnostics(path)
    assert [(line, col) for line, col, _ in found] == [
        (3, 1),
        (4, 1),
        (5, 1),
        (5, 18),
        (7, 15),
        (10, 5),
        (10, 16),
        (11, 14),
    ]
    messages = [message for _, _, message in found]
    assert messages[3].startswith("template reads 'nope'")
    assert messages[4].startswith("python tool 'nosuchmodule:fn': no module named")
    assert messages[6].startswith("template reads 'y'")
    assert messages[7].startswith("unknown toolset 'bad'")


def test_a_misspelt_key_in_every_method_of_a_large_file_is_read_in_linear_time(
    tmp_path: Path,
) -> None:
    # Each 'promt' is read as 'prompt', and the source map moves every path below it:
    # compared path by path with every rename, 4,000 methods took 38 s (a 259 KB file).
    lines = ["version: 1", "name: many", "model: test", "methods:"]
    for i in range(4000):
        lines += [f"  m{i}:", "    inputs: {q: {type: string}}", '    promt: "hi {{ q }}"']
    path = tmp_path / "many.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    started = time.process_time()
    found = diagnostics(path)
    assert time.process_time() - started < 15.0
    assert len(found) == 4000
    assert found[-1][:2] == (12004, 5)
    assert "did you mean 'prompt'" in found[-1][2]


def test_a_duplicate_key_in_the_project_file_hides_no_other_problem(write) -> None:
    write("agents/a.yaml", "version: 1\nname: a\nmodel: test\nmethods: {m: {prompt: hi}}\n")
    project = write(
        "openprogram.yaml",
        """
        version: 1
        name: p
        name: q
        agents: [agents/*.yaml]
        recordngs: recordings
        """,
    )
    found = diagnostics(project.parent)
    assert [(line, col) for line, col, _ in found] == [(3, 1), (5, 1)]
    assert found[1][2].startswith("unknown key 'recordngs'; did you mean 'recordings'?")


def test_unknown_method_on_the_command_line(capsys) -> None:
    from support import EXAMPLES

    code = main([str(EXAMPLES / "triage.yaml"), "clasify", "-i", "ticket=x"])
    err = capsys.readouterr().err
    assert code == 2
    assert "no method 'clasify'; did you mean 'classify'?" in err
    assert "Traceback" not in err


def test_input_failing_its_schema_exits_2(capsys) -> None:
    from support import EXAMPLES

    code = main([str(EXAMPLES / "triage.yaml"), "draft_reply", "-i", "ticket=x", "-i", "tone=rude"])
    err = capsys.readouterr().err
    assert code == 2
    assert "$.tone: 'rude' is not one of ['friendly', 'formal']" in err
    assert "Traceback" not in err


def test_config_error_exits_2_with_positions_and_no_traceback(write, capsys) -> None:
    path = write(
        "a.yaml",
        """
        version: 1
        name: a
        methods:
          m: {prompt: hi, tool_choise: auto}
        """,
    )
    code = main(["check", str(path)])
    err = capsys.readouterr().err
    assert code == 2
    assert (
        f"{path}:4:19: error: unknown key 'tool_choise' in method 'm'; did you mean 'tool_choice'?"
        in err
    )
    assert "Traceback" not in err


def test_a_missing_file_is_named_without_a_position(tmp_path, capsys) -> None:
    missing = tmp_path / "nosuch.yaml"
    assert main(["check", str(missing)]) == 2
    assert f"{missing}: error: no such file or folder" in capsys.readouterr().err


def test_tabs_and_an_agent_without_methods_say_what_to_do(write) -> None:
    tabs = write("tabs.yaml", "version: 1\nname: t\nmethods:\n\tm: {prompt: hi}\n")
    line, col, msg = one(tabs)
    assert (line, col) == (4, 1) and msg.endswith("indent with spaces, not tabs")
    empty = write("empty.yaml", "version: 1\nname: t\nmethods: {}\n")
    assert one(empty) == (3, 10, "'methods': an agent needs at least one method")
