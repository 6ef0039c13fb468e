"""When the spinner shows: after ``SPINNER_DELAY_S`` of waiting; a wait that ended late
because the process was busy (the loop held, as by a first import) waits once more, so an
answer arriving just then shows no flash of spinner. The loop's clock is set by hand: the
timer is due, or late, without any real wait."""

from __future__ import annotations

import asyncio
import io
import os
import select
from collections.abc import Iterator
from typing import TextIO

import pytest

from openprogram_yaml.runner.display import SPINNER_DELAY_S, RunDisplay


class HandClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock moves only when the test moves it."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 1000.0

    def time(self) -> float:
        return self.now


@pytest.fixture
def terminal() -> Iterator[tuple[TextIO, int]]:
    """A pty: the file the display draws its spinner on, and the side that reads it."""
    controller, end = os.openpty()
    with os.fdopen(end, "w", encoding="utf-8") as err:
        yield err, controller
    os.close(controller)


def shown(controller: int) -> bytes:
    out = b""
    while select.select([controller], [], [], 0)[0]:
        chunk = os.read(controller, 4096)
        if not chunk:
            break
        out += chunk
    return out


def run(err: TextIO, *waits: float) -> tuple[str, RunDisplay]:
    """A text method whose answer comes after the loop's clock moved by each of ``waits``
    in turn (each a loop pass, as when the loop was held that long); what stdout got."""
    out = io.StringIO()
    display = RunDisplay(
        "writer.greet", out=out, err=err, secrets=(), streams_text=lambda agent, method: True
    )
    loop = HandClockLoop()

    async def start() -> None:
        display({"type": "method", "agent": "writer", "method": "greet"})

    async def one_pass() -> None:
        await asyncio.sleep(0)

    try:
        loop.run_until_complete(start())
        for wait in waits:
            loop.now += wait
            loop.run_until_complete(one_pass())
        display({"type": "text", "text": "Hello"})
        display.finish("Hello")
    finally:
        display.clear()
        loop.close()
    return out.getvalue(), display


def test_an_answer_after_a_busy_wait_shows_no_spinner(terminal: tuple[TextIO, int]) -> None:
    err, controller = terminal
    answer, _ = run(err, SPINNER_DELAY_S + 0.05)
    assert answer == "Hello\n"
    assert shown(controller) == b""


def test_a_quiet_wait_shows_the_spinner(terminal: tuple[TextIO, int]) -> None:
    err, controller = terminal
    answer, _ = run(err, SPINNER_DELAY_S + 0.001)
    assert answer == "Hello\n"
    assert shown(controller) != b""  # drawn, then cleared


def test_after_a_busy_wait_the_spinner_waits_once_more_then_shows(
    terminal: tuple[TextIO, int],
) -> None:
    err, controller = terminal
    answer, _ = run(err, SPINNER_DELAY_S + 0.05, SPINNER_DELAY_S + 0.5)  # late again: shown
    assert answer == "Hello\n"
    assert shown(controller) != b""
