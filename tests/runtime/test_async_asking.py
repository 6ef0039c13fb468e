"""``Runtime.async_ask`` / ``async_confirm`` / ``async_form``: the person's answers for async
callers, with the sync faces' rules (declines, headless defaults, timeouts)."""

from __future__ import annotations

import asyncio

import pytest
from runtime_support import Make
from test_asking import SilentAsker

from openprogram_yaml import AskTimeout, UserDeclined
from openprogram_yaml.json_types import JSONValue
from openprogram_yaml.providers.test import FakeClock
from openprogram_yaml.runtime.asking import ScriptedAsker

ANSWERS: list[JSONValue] = ["blue", "b", ["x", "z"], "yes", False, {"name": "Ada", "age": 36}]


def test_the_async_faces_answer_as_the_sync_ones_do(make: Make) -> None:
    sync_asker, async_asker = ScriptedAsker(list(ANSWERS)), ScriptedAsker(list(ANSWERS))
    rt, _ = make(asker=sync_asker)
    said = [
        rt.ask("Colour?"),
        rt.ask("Pick", options=["a", "b"]),
        rt.ask("Some", options=["x", "y", "z"], multi=True),
        rt.confirm("Go on?"),
        rt.confirm("Really?"),
        rt.form("Who?", ["name", {"name": "age"}]),
    ]
    art, _ = make(asker=async_asker)

    async def ask_all() -> list[JSONValue]:
        return [
            await art.async_ask("Colour?"),
            await art.async_ask("Pick", options=["a", "b"]),
            await art.async_ask("Some", options=["x", "y", "z"], multi=True),
            await art.async_confirm("Go on?"),
            await art.async_confirm("Really?"),
            await art.async_form("Who?", ["name", {"name": "age"}]),
        ]

    assert asyncio.run(ask_all()) == said == ["blue", "b", ["x", "z"], True, False, said[-1]]
    assert said[-1] == {"name": "Ada", "age": 36}
    assert async_asker.asked == sync_asker.asked


def test_an_async_question_declined_raises_user_declined(make: Make) -> None:
    rt, _ = make(asker=ScriptedAsker([None, None]))

    async def main() -> None:
        with pytest.raises(UserDeclined):
            await rt.async_ask("Name?")
        with pytest.raises(UserDeclined):
            await rt.async_confirm("Sure?")

    asyncio.run(main())


def test_async_headless_answers_the_default_at_once(make: Make, clock: FakeClock) -> None:
    rt, _ = make()

    async def main() -> None:
        assert await rt.async_ask("Name?", default="anon") == "anon"
        assert await rt.async_confirm("Sure?", default=True) is True
        with pytest.raises(AskTimeout):
            await rt.async_form("Who?", ["name"])

    asyncio.run(main())
    assert clock.sleeps == []


def test_async_no_answer_in_time_is_the_default_else_ask_timeout(
    make: Make, clock: FakeClock
) -> None:
    rt, _ = make(asker=SilentAsker())

    async def main() -> None:
        assert await rt.async_ask("Name?", timeout=30, default="anon") == "anon"
        with pytest.raises(AskTimeout):
            await rt.async_ask("Name?", timeout=5)

    asyncio.run(main())
    assert clock.sleeps == [30, 5]
