"""The terminal front end for asking the person: used when stdin and stdout are a terminal.

Plain lines, read from the terminal's file descriptor with the event loop's reader (not
``input()`` in a thread, which no timeout could stop): the terminal's own line editing
(backspace, Ctrl-U) applies, a timeout or Ctrl-C ends the wait cleanly, and a test can
drive it through a pseudo-terminal. Ctrl-D declines.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import UserDeclined
from ..json_types import JSONValue
from ..runtime.asking import Question, check_answer
from ..shown_text import shown_on_terminal

if TYPE_CHECKING:
    from .testing import Writer

__all__ = ["TerminalAsker"]

# What the model wrote (an ask_user question, a confirmation templated from a tool call's
# arguments) must not drive the terminal: an escape sequence could rewrite the very line the
# person approves; it is shown as text (``shown_text``), as the run's display shows answers.


class TerminalAsker:
    """Asks on the terminal: prompts on ``out``, answers read from the file descriptor
    ``fd``. ``before`` runs before each question (the CLI clears its status line)."""

    def __init__(self, fd: int, out: Writer, before: Callable[[], None] | None = None) -> None:
        self.fd = fd
        self.out = out
        self.before = before
        self._buffer = b""
        # One question at a time: parallel tool calls must not interleave their prompts.
        self._lock = asyncio.Lock()

    def can_ask(self) -> bool:
        return True

    async def answer(self, question: Question) -> JSONValue:
        async with self._lock:
            if self.before is not None:
                self.before()
            if question.kind == "form":
                self._say(question.prompt)
                return {f: await self._text(f"{f}: ") for f in question.fields}
            if question.questions:
                self._say(question.prompt)
                return [await self._text(f"{q} ") for q in question.questions]
            while True:
                value = await self._one(question)
                answer, problem = check_answer(question, value)
                if problem is None:
                    return answer
                self._say(f"  ({problem})")

    async def _one(self, question: Question) -> JSONValue:
        if question.kind == "confirm":
            line = await self._text(f"{question.prompt} [y/N] ")
            return line or "no"
        if not question.options:
            return await self._text(f"{question.prompt} ")
        self._say(question.prompt)
        for number, option in enumerate(question.options, 1):
            self._say(f"  {number}) {option}")
        line = await self._text("several, separated by commas: " if question.multi else "> ")
        picked: list[JSONValue] = [_option(question.options, p.strip()) for p in line.split(",")]
        return picked if question.multi else picked[0]

    def _say(self, text: str) -> None:
        self.out.write(shown_on_terminal(text) + "\n")
        self.out.flush()

    async def _text(self, prompt: str) -> str:
        self.out.write(shown_on_terminal(prompt))
        self.out.flush()
        return (await self._line()).strip()

    async def _line(self) -> str:
        loop = asyncio.get_running_loop()
        while b"\n" not in self._buffer:
            ready: asyncio.Future[bytes] = loop.create_future()

            def readable(done: asyncio.Future[bytes] = ready) -> None:
                if not done.done():
                    done.set_result(os.read(self.fd, 4096))

            loop.add_reader(self.fd, readable)
            try:
                chunk = await ready
            finally:
                loop.remove_reader(self.fd)
            if not chunk:  # Ctrl-D at the start of a line: end of input
                raise UserDeclined("the person ended the input (Ctrl-D)")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode("utf-8", "replace")


def _option(options: tuple[str, ...], text: str) -> str:
    """An option picked by its number or its text."""
    if text.isdigit() and 1 <= int(text) <= len(options):
        return options[int(text) - 1]
    return text
