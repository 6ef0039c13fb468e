"""``serve``'s questions: a run that asks waits while a client lists its questions and
answers or declines them over HTTP."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from support import JANITOR_TOOLS

from openprogram_yaml.json_types import JSONObject
from openprogram_yaml.run.questions import PendingQuestions
from openprogram_yaml.run.reload import ProgramHolder
from openprogram_yaml.run.service import RunService
from openprogram_yaml.serve.app import Server, ServeState

AGENT = """\
version: 1
name: janitor
model: test
ask_user: true
tools:
  remove:
    python: janitor_tools:remove
    confirm: "Remove {{ path }}?"
methods:
  tidy:
    prompt: Tidy up.
"""


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    (tmp_path / "janitor_tools.py").write_text(JANITOR_TOOLS)
    path = tmp_path / "agent.yaml"
    path.write_text(AGENT)
    return path


async def _waiting(client: httpx.AsyncClient, count: int) -> list[JSONObject]:
    """The questions once ``count`` wait; polled over HTTP (bounded, no sleep)."""
    for _ in range(2000):
        listed: list[JSONObject] = (await client.get("/questions")).json()["questions"]
        if len(listed) >= count:
            return listed
    raise AssertionError(f"{count} questions never came")


def _serve(agent: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        holder = ProgramHolder(agent)
        holder.load()
        server = Server(ServeState(holder, RunService(holder.snapshot, asker=PendingQuestions())))
        port = await server.start(0)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            try:
                await scenario(client)
            finally:
                await server.close(grace_s=0)

    asyncio.run(main())


def test_a_run_waits_for_its_questions_to_be_answered_over_http(agent: Path) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        run = asyncio.ensure_future(client.post("/run/janitor/tidy", json={}))
        listed = await _waiting(client, 2)
        by_kind = {q["kind"]: q for q in listed}
        assert by_kind["confirm"]["prompt"] == "Remove test?"
        assert by_kind["ask"]["options"] == ["test"]
        ask_id, confirm_id = by_kind["ask"]["id"], by_kind["confirm"]["id"]

        wrong = await client.post(f"/questions/{ask_id}/answer", json={"answer": "Oslo"})
        assert wrong.status_code == 400 and "pick from: test" in wrong.json()["error"]
        ok = await client.post(f"/questions/{confirm_id}/answer", json={"answer": True})
        assert ok.status_code == 200
        again = await client.post(f"/questions/{confirm_id}/answer", json={"answer": True})
        assert again.status_code == 404
        assert (await client.post(f"/questions/{ask_id}/decline", json={})).status_code == 200

        record = (await run).json()
        assert record["status"] == "ok"
        assert "remove: removed test" in record["output"]
        assert "ask_user: The user declined to answer." in record["output"]
        assert record["confirmations"] == [
            {"name": "remove", "question": "Remove test?", "answer": "approved", "by": "user"}
        ]
        assert (await client.get("/questions")).json() == {"questions": []}

    _serve(agent, scenario)


def test_a_declined_confirmation_reaches_the_model_and_the_record(agent: Path) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        run = asyncio.ensure_future(client.post("/run/janitor/tidy", json={}))
        by_kind = {q["kind"]: q for q in await _waiting(client, 2)}
        await client.post(f"/questions/{by_kind['confirm']['id']}/decline", json={})
        await client.post(f"/questions/{by_kind['ask']['id']}/answer", json={"answer": "test"})
        record = (await run).json()
        assert "declined by the user" in record["output"]
        assert "ask_user: test" in record["output"]
        assert record["confirmations"][0]["answer"] == "declined"

    _serve(agent, scenario)


def test_answers_must_be_sent_as_json_from_the_servers_own_origin(agent: Path) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        run = asyncio.ensure_future(client.post("/run/janitor/tidy", json={}))
        listed = await _waiting(client, 2)
        key = listed[0]["id"]
        form = await client.post(
            f"/questions/{key}/decline", content=b"x=1", headers={"Content-Type": "text/plain"}
        )
        assert form.status_code == 415
        foreign = await client.post(
            f"/questions/{key}/decline", json={}, headers={"Origin": "https://evil.example"}
        )
        assert foreign.status_code == 403
        assert (await client.post("/questions/nope/decline", json={})).status_code == 404
        for question in listed:
            await client.post(f"/questions/{question['id']}/decline", json={})
        assert (await run).json()["status"] == "ok"

    _serve(agent, scenario)


def test_a_question_holding_a_secret_is_listed_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JANITOR_TOKEN", "tok-s3cret-value-123")
    (tmp_path / "janitor_tools.py").write_text(JANITOR_TOOLS)
    path = tmp_path / "agent.yaml"
    path.write_text(
        AGENT.replace('"Remove {{ path }}?"', '"Remove {{ path }} as ${env:JANITOR_TOKEN}?"')
    )

    async def scenario(client: httpx.AsyncClient) -> None:
        run = asyncio.ensure_future(client.post("/run/janitor/tidy", json={}))
        listed = await _waiting(client, 2)
        shown = (await client.get("/questions")).text
        assert "tok-s3cret-value-123" not in shown
        assert {q["prompt"] for q in listed if q["kind"] == "confirm"} == {"Remove test as ***?"}
        for question in listed:
            await client.post(f"/questions/{question['id']}/decline", json={})
        assert "tok-s3cret-value-123" not in (await run).text

    _serve(path, scenario)
