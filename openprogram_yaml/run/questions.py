"""Questions waiting for an answer from outside the run: ``serve``'s front end for asking.

A run that asks (``ask_user``, a tool declared ``confirm``) puts its question here and waits;
a client lists the questions, answers or declines one, and the run goes on. The wait is
bounded by ``Asking`` (the seed's timeout), not here.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass

from ..errors import UserDeclined
from ..json_types import JSONObject, JSONValue
from ..runtime.asking import Question, check_answer

__all__ = ["PendingQuestions", "question_list"]


@dataclass(slots=True)
class _Pending:
    """One question and the run waiting on it (on that run's event loop)."""

    question: Question
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[JSONValue]


class PendingQuestions:
    """An ``Asker`` whose questions wait, by id, until ``reply`` or ``decline``."""

    def __init__(self) -> None:
        self._pending: dict[str, _Pending] = {}

    def can_ask(self) -> bool:
        return True

    async def answer(self, question: Question) -> JSONValue:
        loop = asyncio.get_running_loop()
        key = secrets.token_hex(8)
        self._pending[key] = _Pending(question, loop, loop.create_future())
        try:
            return await self._pending[key].future
        finally:
            self._pending.pop(key, None)

    def listed(self) -> list[JSONValue]:
        """The questions waiting, oldest first, each with its ``id``."""
        return [{"id": key, **p.question.to_json()} for key, p in list(self._pending.items())]

    def reply(self, key: str, value: object) -> str | None:
        """Answer question ``key``: None when taken, else what is wrong with the answer.
        ``KeyError`` when no such question waits."""
        pending = self._pending[key]
        answer, problem = check_answer(pending.question, value)
        if problem is not None:
            return problem
        self._settle(key, pending, answer, None)
        return None

    def decline(self, key: str) -> None:
        """Decline question ``key`` (the run gets ``UserDeclined``); ``KeyError`` if unknown."""
        pending = self._pending[key]
        self._settle(key, pending, None, UserDeclined("declined by the user"))

    def _settle(
        self, key: str, pending: _Pending, answer: JSONValue, error: BaseException | None
    ) -> None:
        # Gone from the list at once: a second answer to the same question is a 404.
        del self._pending[key]

        def settle() -> None:
            if pending.future.done():  # the run stopped waiting (timeout, shutdown)
                return
            if error is not None:
                pending.future.set_exception(error)
            else:
                pending.future.set_result(answer)

        # The run may wait on another loop (a sync Runtime.ask in a tool's thread).
        pending.loop.call_soon_threadsafe(settle)


def question_list(board: PendingQuestions) -> JSONObject:
    """The body of ``GET /questions``."""
    return {"questions": board.listed()}
