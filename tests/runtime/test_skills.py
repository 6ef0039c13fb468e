"""Skills in the system prompt: a ``SKILL.md`` that is not a small regular file is left out."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support import without_blocking_on

from openprogram_yaml import Runtime
from openprogram_yaml.providers.test import ScriptedRuntime
from openprogram_yaml.runtime.skills import MAX_SKILL_BYTES


def _skill(root: Path, folder: str, text: str) -> None:
    (root / folder).mkdir()
    (root / folder / "SKILL.md").write_text(text, encoding="utf-8")


def _system_prompt(skill_dir: Path) -> str:
    model = ScriptedRuntime(["a"])
    Runtime(runtimes=model, skills=[str(skill_dir)]).exec("x")
    return model.requests[0].system_prompt or ""


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_named_skill_md_is_left_out_and_never_blocks_a_run(tmp_path: Path) -> None:
    _skill(tmp_path, "pdf", "---\nname: pdf-tools\ndescription: Read PDFs\n---\n")
    (tmp_path / "trap").mkdir()
    fifo = tmp_path / "trap" / "SKILL.md"
    os.mkfifo(fifo)  # no writer: opening it for reading would wait forever
    system = without_blocking_on(fifo, lambda: _system_prompt(tmp_path))
    assert isinstance(system, str)
    assert "<name>pdf-tools</name>" in system
    assert "trap" not in system


def test_a_skill_md_over_the_cap_is_left_out(tmp_path: Path) -> None:
    _skill(tmp_path, "small", "---\nname: small\ndescription: fits\n---\n")
    _skill(tmp_path, "huge", "---\nname: huge\ndescription: too big\n---\n")
    with (tmp_path / "huge" / "SKILL.md").open("ab") as fh:
        fh.truncate(MAX_SKILL_BYTES + 1)  # sparse
    system = _system_prompt(tmp_path)
    assert "<name>small</name>" in system
    assert "huge" not in system


def test_a_skill_md_that_is_not_utf8_is_left_out(tmp_path: Path) -> None:
    _skill(tmp_path, "ok", "---\nname: ok\ndescription: fine\n---\n")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "SKILL.md").write_bytes(b"---\nname: bad\xff\n---\n")
    system = _system_prompt(tmp_path)
    assert "<name>ok</name>" in system
    assert "bad" not in system
