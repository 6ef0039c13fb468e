"""Checking a large hostile template takes time in proportion to its size: positions are
found in one pass over a line, never by searching the whole file (or line) again for each
tag. Before, ``check`` took from 13 s to a minute on each of these (well under a MiB;
a file may hold 16) and grew with the square of the size; now a few seconds at most.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from openprogram_yaml.runner.cli import main

AGENT = """\
version: 1
name: a
model: test
methods:
  m:
    inputs: {zz: {type: string}}
    prompt_file: p.j2
"""


def _checked(tmp_path: Path, capsys: pytest.CaptureFixture[str], template: str) -> str:
    (tmp_path / "agent.yaml").write_text(AGENT, encoding="utf-8")
    (tmp_path / "p.j2").write_text(template, encoding="utf-8")
    (tmp_path / "part.j2").write_text("x", encoding="utf-8")
    started = time.monotonic()
    main(["check", str(tmp_path / "agent.yaml")])
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert elapsed < 10, f"check took {elapsed:.1f} s"
    return err


def test_a_syntax_error_after_many_tokens_on_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each ")" before the first tag was searched back to the line's start for one.
    err = _checked(tmp_path, capsys, "a)" * 300_000 + "{{ x ) }}")
    assert "p.j2:1:600006: error: template syntax error: unexpected ')'" in err, err


def test_many_includes_each_on_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Each include split the whole file into lines to find its own.
    err = _checked(tmp_path, capsys, "{% include 'part.j2' %}\n" * 25_000)
    assert "error" not in err, err


def test_many_includes_on_one_line_are_each_placed_in_their_own_tag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = "{% include 'part.j2' %}" * 25_000 + "{% include zz %}{% include 'gone.j2' %}"
    err = _checked(tmp_path, capsys, line)
    at = len("{% include 'part.j2' %}") * 25_000
    assert f"p.j2:1:{at + 4}: error: include needs the template's name in quotes" in err, err
    assert f"p.j2:1:{at + len('{% include zz %}') + 12}: error: template 'gone.j2'" in err, err


def test_many_names_in_a_plain_template(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Each name counted the lines from the file's start to itself.
    err = _checked(tmp_path, capsys, "{{ zz }}\n" * 150_000)
    assert "error" not in err, err
