"""Every front end's runs are exported: a run served over HTTP, and the tests of a prompt
repository (``openprogram-run test``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
from otel_helpers import AGENT, spans_in_memory, tree, write_desk

from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.run.reload import ProgramHolder
from openprogram_yaml.run.render import Rendered, render_method
from openprogram_yaml.run.service import RunService
from openprogram_yaml.run.version import VersionStamp
from openprogram_yaml.runner.cli import main
from openprogram_yaml.serve.app import Server, ServeState


def test_a_served_run_is_exported_from_the_trace_its_history_keeps(tmp_path: Path) -> None:
    path = write_desk(tmp_path)

    async def scenario() -> dict[str, object]:
        holder = ProgramHolder(path)
        holder.load()
        state = ServeState(holder, RunService(holder.snapshot))
        server = Server(state)
        port = await server.start(0)
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                reply = await client.post("/run/desk/ask", json={"ticket": "T-17"})
                assert reply.status_code == 200, reply.text
                run_id = reply.json()["id"]
                one: dict[str, object] = (await client.get(f"/runs/{run_id}")).json()
                return one
        finally:
            await server.close(grace_s=0)

    with spans_in_memory() as exporter:
        served = asyncio.run(scenario())
    spans = exporter.get_finished_spans()
    assert tree(spans) == [
        "invoke_agent desk",
        "  desk.ask",
        "    chat test",
        "      execute_tool lookup",
    ]
    nodes = served["trace"]
    assert isinstance(nodes, list) and len(nodes) == len(spans)


def test_the_tests_of_a_prompt_repository_are_exported(tmp_path: Path) -> None:
    tests = """
tests:
  - name: looks up
    method: ask
    inputs: {ticket: T-1}
    expect: {tools_called: [lookup]}
  - name: looks up again
    method: ask
    inputs: {ticket: T-2}
"""
    path = write_desk(tmp_path, AGENT + tests)
    with spans_in_memory() as exporter:
        assert main(["test", str(path)]) == 0
    roots = [s.name for s in exporter.get_finished_spans() if s.parent is None]
    assert roots == ["invoke_agent desk", "invoke_agent desk"]


def test_a_render_exports_no_span(tmp_path: Path) -> None:
    """Render stops a method before its model call: no run happened, none is exported (the
    web page's Render button used to export a failed run per click)."""
    path = write_desk(tmp_path)
    program = compile_path(path)

    async def render() -> Rendered:
        return await render_method(
            program, VersionStamp(program.version), "desk", "ask", {"ticket": "T-17"}
        )

    with spans_in_memory() as exporter:
        rendered = asyncio.run(render())
    assert rendered.request is not None
    assert exporter.get_finished_spans() == ()
