"""Hostile files: each gets a positioned error and exit status 2, never a traceback or a hang.

Every case drives the command line twice, as a user would: ``check`` and a run. Both must
refuse the file at load time with ``path:line:col: error: …``; nothing reaches a model.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
from pathlib import Path

import pytest

from openprogram_yaml.runner.cli import main
from openprogram_yaml.spec.textfile import MAX_TEXT_BYTES

AGENT = """\
version: 1
name: a
model: test
methods:
  m:
"""


def _agent(
    tmp_path: Path, method_body: str, *, name: str = "agent.yaml", head: str = AGENT
) -> Path:
    path = tmp_path.resolve() / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(head + textwrap.indent(textwrap.dedent(method_body), "    "), encoding="utf-8")
    return path


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert code == 2, err
    return err


def _positioned(err: str, path: Path | str, line: int | None = None) -> list[str]:
    """The ``path:line:col: error:`` lines of ``err`` about ``path`` (at ``line``)."""
    where = re.escape(str(path)) + (rf":{line}:" if line else r":\d+:") + r"\d+: error: "
    found = [ln for ln in err.splitlines() if re.match(where, ln)]
    assert found, f"no positioned error for {path}:{line or ''} in:\n{err}"
    return found


def _check_and_run(capsys: pytest.CaptureFixture[str], path: Path, line: int) -> str:
    """Both ``check`` and a run refuse ``path`` with an error at ``line``; the check's text."""
    err = _refused(capsys, ["check", str(path)])
    _positioned(err, path, line)
    run_err = _refused(capsys, [str(path), "m"])
    _positioned(run_err, path, line)
    return err


# --- templates that nest too deeply -----------------------------------------------------------


@pytest.mark.parametrize(
    "prompt",
    [
        "{{ " + "(" * 10_000 + "1" + ")" * 10_000 + " }}",
        "{% if true %}" * 2_000 + "x" + "{% endif %}" * 2_000,
        "{{ " + "[" * 300 + "1" + "]" * 300 + " }}",
        # Jinja parses these, but the Python code it makes of them does not compile.
        "{% if true %}" * 120 + "x" + "{% endif %}" * 120,
        "{% for a in [1] %}" * 25 + "x" + "{% endfor %}" * 25,
    ],
    ids=["10k-parens", "2k-ifs", "300-lists", "120-ifs", "25-fors"],
)
def test_deeply_nested_template_is_a_positioned_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], prompt: str
) -> None:
    path = _agent(tmp_path, f"prompt: '{prompt}'\n")
    err = _check_and_run(capsys, path, 6)
    assert "template nests too deeply" in err


def test_deeply_nested_prompt_file_is_positioned_in_that_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prompt = tmp_path.resolve() / "deep.j2"
    prompt.write_text("Hello\n{{ " + "(" * 5_000 + "1" + ")" * 5_000 + " }}\n")
    path = _agent(tmp_path, "prompt_file: deep.j2\n")
    err = _refused(capsys, ["check", str(path)])
    assert "template nests too deeply" in _positioned(err, prompt, 2)[0]


def test_deeply_nested_yaml_is_a_positioned_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path.resolve() / "deep.yaml"
    path.write_text("version: 1\nname: " + "[" * 990 + "]" * 990 + "\n")
    err = _refused(capsys, ["check", str(path)])
    assert "nests too deeply" in _positioned(err, path, 2)[0]


def test_deeply_nested_json_schema_file_is_a_positioned_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = tmp_path.resolve() / "deep.json"
    schema.write_text('{"type": "array", "items": ' * 3_000 + "{}" + "}" * 3_000)
    path = _agent(tmp_path, "prompt: hi\nresponse_schema: {$ref: deep.json}\n")
    err = _refused(capsys, ["check", str(path)])
    assert "nests too deeply" in _positioned(err, schema, 1)[0]


# --- numbers past the digits Python converts --------------------------------------------------


def test_a_number_of_too_many_digits_in_yaml_is_a_positioned_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # int() refuses 4,300+ digits: in an agent file it was a ValueError's traceback.
    path = _agent(tmp_path, "prompt: hi\ntemperature: " + "7" * 5_000 + "\n")
    err = _refused(capsys, ["check", str(path)])
    assert "a number of more than 4,300 digits" in _positioned(err, path, 7)[0]


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("!!bool maybe", "'maybe' is not a valid !!bool"),  # was a KeyError's traceback
        ("!!timestamp soon", "'soon' is not a valid !!timestamp"),  # an AttributeError's
        ("!!float abc", "'abc' is not a valid !!float"),  # was "more than 4,300 digits"
        ('!!int "x"', "'x' is not a valid !!int"),
    ],
)
def test_text_an_explicit_tag_cannot_hold_is_a_positioned_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, said: str
) -> None:
    path = _agent(tmp_path, f"prompt: hi\ntemperature: {value}\n")
    err = _refused(capsys, ["check", str(path)])
    assert f"invalid value: {said}" in _positioned(err, path, 7)[0]


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_number_of_too_many_digits_in_a_schema_file_is_said_plainly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str
) -> None:
    # It was Python's own message, naming sys.set_int_max_str_digits().
    schema = tmp_path.resolve() / f"big{suffix}"
    schema.write_text('{"type": "object", "maxProperties": ' + "7" * 5_000 + "}")
    path = _agent(tmp_path, f"prompt: hi\nresponse_schema: {{$ref: big{suffix}}}\n")
    err = _refused(capsys, ["check", str(path)])
    assert "digits" in _positioned(err, schema, 1)[0]
    assert "set_int_max_str_digits" not in err


@pytest.mark.parametrize("where", ["inputs: {q: {type: string, pattern: '^(a+)+$'}}", "response"])
def test_a_schema_pattern_nesting_repetitions_is_a_positioned_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    # Checking a served input or a model's reply against it (Python's re words the
    # validator's error) backtracked for minutes on forty 'a' and a '!', holding the server.
    if where == "response":
        where = "response_schema: {type: string, pattern: '(\\w+\\s?)*$'}"
    path = _agent(tmp_path, f"prompt: hi\n{where}\n")
    err = _refused(capsys, ["check", str(path)])
    assert "nests unbounded repetitions" in _positioned(err, path, 7)[0]


@pytest.mark.parametrize("pattern", ["^(a|aa)+$", "(\\r\\n|\\r|\\n)*$"])
def test_a_schema_pattern_repeating_overlapping_alternatives_is_a_positioned_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pattern: str
) -> None:
    # Forty 'a' and a '!' against (a|aa)+$ take minutes too (it passed the check before).
    path = _agent(tmp_path, f"prompt: hi\ninputs: {{q: {{type: string, pattern: '{pattern}'}}}}\n")
    err = _refused(capsys, ["check", str(path)])
    [line] = _positioned(err, path, 7)
    assert "repeats alternatives that can match the same text (as (a|aa)+ does)" in line
    assert "make the alternatives match different text" in line


# --- undecodable bytes ------------------------------------------------------------------------

_GOOD = "version: 1\nname: a\nmodel: test\nmethods:\n  m:\n    prompt: hi\n"


@pytest.mark.parametrize(
    ("data", "line", "col"),
    [
        ("version: 1\nname: a\ndescription: café\n".encode("latin-1"), 3, 17),
        (_GOOD.encode("utf-16"), 1, 1),
        (_GOOD.encode("utf-16-le"), 1, 2),
        (b"version: 1\nname: a\ndescription: x\xed\xa0\x80y\n", 3, 15),
    ],
    ids=["latin-1", "utf-16-bom", "utf-16-no-bom", "lone-surrogate"],
)
def test_undecodable_agent_file_names_the_first_bad_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes, line: int, col: int
) -> None:
    path = tmp_path.resolve() / "agent.yaml"
    path.write_bytes(data)
    err = _refused(capsys, ["check", str(path)])
    message = _positioned(err, path, line)[0]
    assert message.startswith(f"{path}:{line}:{col}: error: ")
    assert "UTF-8" in message
    assert "tabs" not in message  # not a YAML indentation problem
    _positioned(_refused(capsys, [str(path), "m"]), path, line)


def test_undecodable_prompt_file_names_the_first_bad_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prompt = tmp_path.resolve() / "p.j2"
    prompt.write_bytes("line one\nsecond line: naïve\n".encode("latin-1"))
    path = _agent(tmp_path, "prompt_file: p.j2\n")
    err = _refused(capsys, ["check", str(path)])
    assert _positioned(err, prompt, 2)[0].startswith(f"{prompt}:2:16: error: ")


def test_undecodable_included_template_names_the_first_bad_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    part = tmp_path.resolve() / "part.j2"
    part.write_bytes(b"ok\n\xff\n")
    path = _agent(tmp_path, "prompt: \"{% include './part.j2' %}\"\n")
    err = _refused(capsys, ["check", str(path)])
    assert _positioned(err, part, 2)[0].startswith(f"{part}:2:1: error: ")


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_undecodable_schema_file_names_the_first_bad_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str
) -> None:
    schema = tmp_path.resolve() / f"label{suffix}"
    schema.write_bytes(b'{"type": "string",\n "description": "caf\xe9"}\n')
    path = _agent(tmp_path, f"prompt: hi\nresponse_schema: {{$ref: label{suffix}}}\n")
    err = _refused(capsys, ["check", str(path)])
    assert _positioned(err, schema, 2)[0].startswith(f"{schema}:2:21: error: ")


def test_undecodable_project_file_names_the_first_bad_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path.resolve() / "openprogram.yaml"
    project.write_bytes(b"version: 1\nname: caf\xe9\n")
    err = _refused(capsys, ["check", str(tmp_path)])
    assert _positioned(err, project, 2)[0].startswith(f"{project}:2:10: error: ")


# --- agents: globs may not leave the project ---------------------------------------------------


@pytest.mark.parametrize("pattern", ["/etc/*.conf", "/**/*.yaml", "../*.yaml", "a/../../*.yaml"])
def test_agents_glob_outside_the_project_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pattern: str
) -> None:
    root = tmp_path.resolve() / "repo"
    root.mkdir()
    (tmp_path / "outside.yaml").write_text(_GOOD)
    (root / "openprogram.yaml").write_text(f"version: 1\nagents: ['{pattern}']\n")
    err = _refused(capsys, ["check", str(root)])
    (problem,) = _positioned(err, root / "openprogram.yaml", 2)
    assert pattern in problem
    assert len(err.splitlines()) == 2  # the problem and the count: nothing outside was read


@pytest.mark.parametrize("key", ["agents", "tests"])
def test_agents_and_tests_globs_outside_the_project_are_refused_before_walking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str
) -> None:
    root = tmp_path.resolve()
    (root / "openprogram.yaml").write_text(f"version: 1\n{key}: ['/**/*.yaml']\n")
    err = _refused(capsys, ["check", str(root)])
    assert "absolute" in _positioned(err, root / "openprogram.yaml", 2)[0]


# --- what check passed and the run refused -----------------------------------------------------


@pytest.mark.parametrize(
    "schema",
    [
        "{type: string, pattern: '(['}",
        "{type: object, patternProperties: {'a(': {type: string}}}",
        "{type: object, properties: {x: {type: string, pattern: '*x'}}}",
    ],
    ids=["pattern", "patternProperties", "nested-pattern"],
)
def test_invalid_regex_in_schema_is_a_load_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], schema: str
) -> None:
    path = _agent(tmp_path, f"prompt: hi\nresponse_schema: {schema}\n")
    err = _check_and_run(capsys, path, 7)
    assert "regular expression" in err


def test_invalid_regex_in_input_schema_is_a_load_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _agent(tmp_path, "prompt: '{{ x }}'\ninputs: {x: {type: string, pattern: '(['}}\n")
    err = _check_and_run(capsys, path, 7)
    assert "regular expression" in err


@pytest.mark.parametrize("name", ["'bad name!'", "'a.b'", "''", "x" * 57])
def test_choice_name_the_pick_cannot_carry_is_a_load_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    path = _agent(tmp_path, f"prompt: hi\nchoices:\n  {name}: {{description: x, value: 1}}\n")
    err = _check_and_run(capsys, path, 8)
    assert "choice name" in err


def test_choice_names_with_dashes_digits_and_underscores_are_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _agent(
        tmp_path,
        "prompt: hi\nchoices:\n  go-on_v2: {description: x, value: 1}\n  1st: {value: 2}\n",
    )
    assert main(["check", str(path)]) == 0, capsys.readouterr().err


@pytest.mark.parametrize(
    ("prompt", "name"),
    [
        ("{{ x.__class__ }}", "__class__"),
        ("{{ x.upper.__globals__ }}", "__globals__"),
        ("{{ x|attr('__class__') }}", "__class__"),
        ("{{ x|attr('_private') }}", "_private"),
        ('{{ x["__class__"] }}', "__class__"),
        ("{% set y = x.__dict__ %}{{ y }}", "__dict__"),
        ("{{ (x|list).__len__() }}", "__len__"),
        ("{{ x|map(attribute='__class__')|list }}", "__class__"),
        ("{{ x|selectattr('a.__class__')|list }}", "__class__"),
    ],
    ids=[
        "__class__",
        "__globals__",
        "attr-filter",
        "attr-underscore",
        "subscript",
        "set",
        "call",
        "map-attribute",
        "selectattr",
    ],
)
def test_attribute_the_sandbox_refuses_is_a_load_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], prompt: str, name: str
) -> None:
    path = _agent(tmp_path, f"inputs: {{x: {{type: string}}}}\nprompt: |-\n  {prompt}\n")
    err = _check_and_run(capsys, path, 8)
    (message,) = _positioned(err, path, 8)
    col = 7 + prompt.index(name) - (1 if prompt[prompt.index(name) - 1] in "'\"" else 0)
    assert message.startswith(f"{path}:8:{col}: error: ")
    assert "the sandbox refuses" in message


def test_safe_attributes_and_items_still_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _agent(
        tmp_path,
        "inputs: {x: {type: object}}\n"
        "prompt: \"{{ x.title }} {{ x['a b'] }} {{ x|attr('name') }} {{ x._id }}\"\n",
    )
    assert main(["check", str(path)]) == 0, capsys.readouterr().err


def test_agent_with_no_model_is_a_load_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path.resolve() / "agent.yaml"
    path.write_text("version: 1\nname: a\nmethods:\n  m:\n    prompt: hi\n")
    err = _check_and_run(capsys, path, 2)
    assert "no model" in err


def test_agent_whose_methods_all_name_a_model_needs_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path.resolve() / "agent.yaml"
    path.write_text(
        "version: 1\nname: a\ndefaults: {model: test}\nmethods:\n  m:\n    prompt: hi\n"
    )
    assert main(["check", str(path)]) == 0, capsys.readouterr().err


# --- messages that name the real cause ---------------------------------------------------------


def test_file_with_too_many_keys_is_not_called_an_alias_bomb(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path.resolve() / "big.yaml"
    path.write_text(
        "version: 1\nname: a\nvars:\n" + "".join(f"  k{i}: 1\n" for i in range(120_000))
    )
    err = _refused(capsys, ["check", str(path)])
    (message,) = _positioned(err, path)
    assert "alias" not in message
    assert "100,000" in message


def test_alias_bomb_is_still_called_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path.resolve() / "bomb.yaml"
    lines = ["version: 1", "name: a", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 7)]
    path.write_text("\n".join(lines) + "\n")
    err = _refused(capsys, ["check", str(path)])
    assert "aliases" in _positioned(err, path)[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_prompt_file_is_not_a_regular_file_and_never_blocks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    os.mkfifo(tmp_path / "p.txt")  # nobody ever writes to it: opening it would block
    path = _agent(tmp_path, "prompt_file: p.txt\n")
    err = _check_and_run(capsys, path, 6)
    assert "not a regular file" in err
    assert "no such file" not in err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_schema_and_included_template_never_block(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    os.mkfifo(tmp_path / "s.json")
    os.mkfifo(tmp_path / "part.j2")
    path = _agent(
        tmp_path, "prompt: \"{% include './part.j2' %}\"\nresponse_schema: {$ref: s.json}\n"
    )
    err = _refused(capsys, ["check", str(path)])
    assert err.count("not a regular file") == 2, err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_agent_file_never_blocks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.mkfifo(tmp_path / "agent.yaml")
    err = _refused(capsys, ["check", str(tmp_path.resolve() / "agent.yaml")])
    assert "not a regular file" in err


@pytest.mark.parametrize("text", ["# just a comment\n# and another\n", "\n\n", ""])
def test_file_with_no_document_says_what_it_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    path = tmp_path.resolve() / "agent.yaml"
    path.write_text(text)
    err = _refused(capsys, ["check", str(path)])
    (message,) = _positioned(err, path, 1)
    if "#" in text:
        assert "only comments" in message
    else:
        assert "empty" in message


# --- one error does not hide the others --------------------------------------------------------


def test_unset_env_variable_does_not_hide_later_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path.resolve() / "agent.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            version: 1
            name: a
            model: ${env:HOSTILE_UNSET_MODEL}
            methods:
              m:
                inputs: {x: {type: string}}
                prompt: '{{ y }}'
                response_schema: {type: strin}
              n:
                prompt: hi
                choices:
                  'bad name!': {method: nowhere}
            """
        )
    )
    err = _refused(capsys, ["check", str(path)])
    _positioned(err, path, 3)  # the variable
    _positioned(err, path, 7)  # the template
    _positioned(err, path, 8)  # the schema
    assert len(_positioned(err, path, 12)) == 2  # the choice's name and its target
    assert "no model" not in err  # the model is missing because the variable is


def test_tool_with_no_kind_does_not_hide_a_schema_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _agent(
        tmp_path,
        "prompt: hi\nresponse_schema: {type: strin}\n",
        head=AGENT.replace("methods:", "tools:\n  t: {description: x}\nmethods:"),
    )
    err = _refused(capsys, ["check", str(path)])
    _positioned(err, path, 5)  # the tool
    _positioned(err, path, 9)  # the schema


def test_method_tool_calling_a_broken_agent_says_it_failed_to_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path.resolve()
    (root / "openprogram.yaml").write_text("version: 1\nagents: ['*.yaml']\n")
    (root / "editor.yaml").write_text(
        "version: 1\nname: editor\nmodel: test\nmethods:\n  x:\n    prompt: '{{ nope }}'\n"
    )
    (root / "main.yaml").write_text(
        "version: 1\nname: main\nmodel: test\ntools:\n  ed: {method: editor.x}\n"
        "methods:\n  m:\n    prompt: hi\n"
    )
    err = _refused(capsys, ["check", str(root)])
    _positioned(err, root / "editor.yaml", 6)
    (follow_on,) = _positioned(err, root / "main.yaml", 5)
    assert "agent 'editor' failed to load" in follow_on
    assert "editor.yaml" in follow_on
    assert "not in this project" not in err


def test_test_file_naming_a_broken_agent_says_it_failed_to_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path.resolve()
    (root / "openprogram.yaml").write_text(
        "version: 1\nagents: ['editor.yaml']\ntests: ['t.yaml']\n"
    )
    (root / "editor.yaml").write_text("version: 1\nname: editor\nmodel: test\nmethods: {}\n")
    (root / "t.yaml").write_text("version: 1\nagent: editor\ntests: []\n")
    err = _refused(capsys, ["check", str(root)])
    (follow_on,) = _positioned(err, root / "t.yaml", 2)
    assert "agent 'editor' failed to load" in follow_on
    assert "no agent" not in follow_on


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX paths")
def test_many_hostile_files_at_once_each_get_their_own_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path.resolve()
    files = {
        "deep.yaml": _GOOD.replace("hi", "'{{ " + "(" * 3_000 + " }}'"),
        "latin.yaml": "version: 1\nname: é\n",
        "dunder.yaml": _GOOD.replace("hi", "'{{ m.__class__ }}'"),
        "comments.yaml": "# nothing\n",
    }
    paths = []
    for name, text in files.items():
        path = root / name
        path.write_bytes(text.encode("latin-1"))
        paths.append(str(path))
    err = _refused(capsys, ["check", *paths])
    for path in paths:
        _positioned(err, path)


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_invalid_regex_in_a_referenced_schema_file_is_a_load_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str
) -> None:
    schema = tmp_path.resolve() / f"s{suffix}"
    schema.write_text(
        '{"type": "object",\n "properties": {"a": {"type": "string", "pattern": "(["}}}'
    )
    path = _agent(tmp_path, f"prompt: hi\nresponse_schema: {{$ref: s{suffix}}}\n")
    err = _refused(capsys, ["check", str(path)])
    line = 2 if suffix == ".yaml" else 1
    assert "regular expression" in _positioned(err, schema, line)[0]


@pytest.mark.parametrize("name", ["bad name!", "a.b", "", "x" * 57, "ok", "1st", "go-on_v2"])
def test_load_time_choice_names_agree_with_the_runtime(tmp_path: Path, name: str) -> None:
    from openprogram_yaml.runtime.choices import normalize_choices

    try:
        normalize_choices({name: None})
        runtime_accepts = True
    except ValueError:
        runtime_accepts = False
    path = _agent(tmp_path, f"prompt: hi\nchoices:\n  '{name}': {{value: 1}}\n")
    assert (main(["check", str(path)]) == 0) == runtime_accepts


def test_control_character_is_positioned_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path.resolve() / "agent.yaml"
    path.write_text("version: 1\nname: a\x01\n")
    err = _refused(capsys, ["check", str(path)])
    (message,) = _positioned(err, path, 2)
    assert message.startswith(f"{path}:2:8: error: ") and "'\\x01'" in message
    assert "position" not in err  # the reader's own "in <unicode string>, position 18"


def test_huge_files_are_refused_before_they_are_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Sparse files of zeros, one byte over the limit: read whole, a 3 GiB one took 33 s and
    # 6 GB of memory to be called "not UTF-8".
    for name in ("p.j2", "part.j2", "s.json"):
        with open(tmp_path / name, "wb") as f:
            f.truncate(MAX_TEXT_BYTES + 1)
    path = _agent(tmp_path, "prompt_file: p.j2\nresponse_schema: {$ref: s.json}\n")
    err = _check_and_run(capsys, path, 6)
    assert err.count("larger than 16 MiB") == 2, err
    path = _agent(tmp_path, "prompt: \"{% include './part.j2' %}\"\n", name="b.yaml")
    assert "larger than 16 MiB" in _refused(capsys, ["check", str(path)])
    big = tmp_path / "big.yaml"
    with open(big, "wb") as f:
        f.truncate(MAX_TEXT_BYTES + 1)
    assert f"{big}: error: the file is larger than 16 MiB" in _refused(capsys, ["check", str(big)])
