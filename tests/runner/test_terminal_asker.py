"""The terminal asker shows what the model wrote as text: a question or a tool's templated
confirmation cannot move the cursor or rewrite the line the person is answering."""

from __future__ import annotations

import asyncio
import io
import os

from openprogram_yaml.runner.terminal_asker import TerminalAsker
from openprogram_yaml.runtime.asking import Question


def _asked(question: Question, typed: bytes) -> tuple[object, str]:
    read, write = os.pipe()
    os.write(write, typed)
    out = io.StringIO()
    try:
        answer = asyncio.run(TerminalAsker(read, out).answer(question))
    finally:
        os.close(read)
        os.close(write)
    return answer, out.getvalue()


def test_control_characters_in_a_question_are_shown_not_obeyed() -> None:
    spoof = "Delete /home?\x1b[2K\r\x9b2KList files?"
    answer, shown = _asked(Question("confirm", spoof), b"y\n")
    assert answer is True
    assert "\x1b" not in shown and "\r" not in shown and "\x9b" not in shown
    assert "Delete /home?" in shown and "\\x1b[2K" in shown


def test_options_and_form_fields_are_shown_as_text_too() -> None:
    _, shown = _asked(Question("ask", "Pick", options=("a\x1b[1A", "b")), b"2\n")
    assert "\x1b" not in shown and "a\\x1b[1A" in shown
    answer, shown = _asked(Question("form", "Fill\x07", fields=("na\x1bme",)), b"Ann\n")
    assert answer == {"na\x1bme": "Ann"}
    assert "\x1b" not in shown and "\x07" not in shown


def test_a_question_keeps_its_line_breaks_and_tabs() -> None:
    _, shown = _asked(Question("ask", "First line\n\tsecond"), b"ok\n")
    assert "First line\n\tsecond" in shown
