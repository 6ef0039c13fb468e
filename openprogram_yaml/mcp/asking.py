"""Questions of a run served over MCP, put to the person through the client (elicitation).

A run that asks (``ask_user``, a tool declared ``confirm``) is answering one ``tools/call``;
its question goes back to the client that made that call as an ``elicitation/create`` form,
on that call's own stream. The call's session reaches the run through ``CALLER``, a context
variable the tool handler sets before starting the run: the run's task, and every task and
worker thread it starts, copies the context it was created in, so parallel calls from
different clients each ask their own client.

Only a client that declared the ``elicitation`` capability on a connection that may carry
server requests (the 2025 handshake protocol; 2026-07-28 forbids server requests) is asked.
Otherwise nobody is there: a tool declared ``confirm`` is refused unless the server runs
with ``--yes``, and ``ask_user`` gets its default or fails, as in any headless run.

A client that answers with an error, or with a result that is no ``ElicitResult``, has
declined: the run goes on as for "decline" (it failed with pydantic's dump of the result).
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from ..errors import UserDeclined
from ..json_types import JSONValue
from ..redaction import redact
from ..runtime.asking import Question, check_answer

__all__ = ["CALLER", "Caller", "ElicitingAsker", "can_elicit"]


@dataclass(frozen=True, slots=True)
class Caller:
    """The client a run answers: its session, and the request the run serves."""

    session: ServerSession
    request_id: types.RequestId | None


#: The caller of the ``tools/call`` a run serves; None outside one (or when it cannot be asked).
CALLER: ContextVar[Caller | None] = ContextVar("openprogram_mcp_caller", default=None)

_ELICITATION = types.ClientCapabilities(elicitation=types.ElicitationCapability())


def can_elicit(session: ServerSession) -> bool:
    """Whether the client behind ``session`` can be asked a question now."""
    return session.can_send_request and session.check_client_capability(_ELICITATION)


class ElicitingAsker:
    """An ``Asker`` that puts each question to the client of the call the run serves."""

    def __init__(self, secrets: Callable[[], frozenset[str]]) -> None:
        #: What must not be shown to the client (a question may quote a tool's arguments).
        self.secrets = secrets

    def can_ask(self) -> bool:
        return CALLER.get() is not None

    async def answer(self, question: Question) -> JSONValue:
        caller = CALLER.get()
        if caller is None:
            raise UserDeclined("no MCP client to ask")
        schema, read = _form(question)
        try:
            result = await caller.session.elicit_form(
                redact(question.prompt, self.secrets()),
                schema,
                related_request_id=caller.request_id,
            )
        except MCPError as exc:  # the client answered with an error, or went away
            raise UserDeclined(f"the MCP client did not answer: {exc.error.message}") from None
        except ValidationError:  # a result that is no ElicitResult ({"action": "explode"})
            raise UserDeclined("the MCP client's answer could not be read") from None
        if result.action != "accept":
            raise UserDeclined(f"the MCP client's user chose '{result.action}'")
        answer, problem = check_answer(question, read(result.content or {}))
        if problem is not None:
            raise UserDeclined(f"the answer from the MCP client does not fit: {problem}")
        return answer


Reader = Callable[[dict[str, Any]], object]


def _form(question: Question) -> tuple[dict[str, Any], Reader]:
    """The elicitation schema for ``question`` (flat: MCP forms do not nest), and how to
    read the accepted form back into the answer ``check_answer`` takes."""
    if question.kind == "confirm":
        return _schema({"approve": {"type": "boolean", "title": "Approve"}}), lambda c: c.get(
            "approve", False
        )
    if question.kind == "form":
        fields = {f: {"type": "string", "title": f} for f in question.fields}
        return _schema(fields), lambda c: {f: c.get(f, "") for f in question.fields}
    if question.questions:
        keys = [f"answer_{n}" for n in range(1, len(question.questions) + 1)]
        props = {
            k: {"type": "string", "title": q} for k, q in zip(keys, question.questions, strict=True)
        }
        return _schema(props), lambda c: [c.get(k, "") for k in keys]
    if question.options and question.multi:
        many = {
            "type": "array",
            "title": "Answer",
            "items": {"type": "string", "enum": list(question.options)},
        }
        return _schema({"answer": many}), lambda c: c.get("answer", [])
    if question.options:
        one = {"type": "string", "title": "Answer", "enum": list(question.options)}
        return _schema({"answer": one}), lambda c: c.get("answer")
    return _schema({"answer": {"type": "string", "title": "Answer"}}), lambda c: c.get("answer")


def _schema(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties)}
