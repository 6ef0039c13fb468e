"""Per-call overhead: sequential calls through ``Runtime.exec`` in a warm process, beside
bare aiohttp making the same HTTP exchanges in the same run (loopback server, no latency).

The paths a batch uses: plain text; a response schema (the reply parsed and validated); a
tool round trip (the model calls a sync ``python:`` tool, then answers: two requests); the
same with an ``async def`` tool (run on the loop, where a sync one goes to a worker thread:
``runtime/blocking.py`` says why). The bare side sends the same bodies and reads the same
replies (for the tool paths: both requests, the tool called in line).

Each path is timed twice through the project: ``Runtime.exec`` (the Python API), and a
compiled agent's method run as a batch runs its rows (``execute_run``, shared runtimes).

Goal: every path at most 1.3x bare aiohttp's time per call. Also shown, for the transport
decision: httpx's default transport, bare and under ``Runtime.exec`` (plain path). Beside the
goals, not instead of them: ``Runtime.async_exec`` (no loop entry per call, as the bare side
runs), and for the schema path a bare side that writes its body for each call and checks
the answer against the schema, as a client that trusts no reply must (the baseline sends
one body written once and only decodes the answer).

    python benchmarks/per_call.py [--calls 1000] [--rounds 5] [--no-httpx]
        [--paths plain,schema,tools,async_tool]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import jsonschema_rs
from _common import chat_server, median, report

from openprogram_yaml.providers.openai import OpenAIRuntime
from openprogram_yaml.runtime.runtime import Runtime
from openprogram_yaml.runtimes.rules import RuntimeRule
from openprogram_yaml.runtimes.select import RuntimeSelector
from openprogram_yaml.tools.python import PythonTool

HEADERS = {"content-type": "application/json"}
SCHEMA = {
    "type": "object",
    "properties": {"label": {"type": "string", "enum": ["billing", "bug", "other"]}},
    "required": ["label"],
    "additionalProperties": False,
}
USER = {"role": "user", "content": "ping"}
PLAIN_BODY = json.dumps({"model": "bench", "messages": [USER]})
SCHEMA_BODY = json.dumps(
    {
        "model": "bench",
        "messages": [USER],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": SCHEMA, "strict": True},
        },
    }
)
SCHEMA_REQUEST = json.loads(SCHEMA_BODY)
CHECK = jsonschema_rs.validator_for(SCHEMA)
TOOL_SPEC = {
    "type": "function",
    "function": {
        "name": "echo",
        "description": "Say the text back.",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    },
}


def echo(text: str) -> str:
    """Say the text back."""
    return text


async def aecho(text: str) -> str:
    """Say the text back."""
    return text


class Bare:
    """Sequential exchanges with a bare client on a loop of its own, timed block by block."""

    def __init__(self, url: str, kind: str, path: str = "plain") -> None:
        self.loop = asyncio.new_event_loop()
        self.url = f"{url}/chat/completions"
        self.kind = kind
        self.path = path
        self.session: aiohttp.ClientSession | httpx.AsyncClient = self.loop.run_until_complete(
            self._open()
        )

    async def _open(self) -> aiohttp.ClientSession | httpx.AsyncClient:
        if self.kind == "aiohttp":
            return aiohttp.ClientSession()
        return httpx.AsyncClient()

    async def _post(self, body: str) -> dict[str, object]:
        if isinstance(self.session, aiohttp.ClientSession):
            async with self.session.post(self.url, data=body, headers=HEADERS) as r:
                data: dict[str, object] = json.loads(await r.read())
                return data
        reply = await self.session.post(self.url, content=body, headers=HEADERS)
        data = json.loads(reply.content)
        return data

    async def _one(self) -> object:
        if self.path == "plain":
            data = await self._post(PLAIN_BODY)
            return data["choices"][0]["message"]["content"]  # type: ignore[index]
        if self.path == "schema":
            data = await self._post(SCHEMA_BODY)
            return json.loads(data["choices"][0]["message"]["content"])  # type: ignore[index]
        if self.path == "schema_checked":
            # What any client that trusts no reply does: write the body for this call and
            # check the answer against the schema (compiled once, jsonschema_rs).
            data = await self._post(json.dumps(SCHEMA_REQUEST))
            value = json.loads(data["choices"][0]["message"]["content"])  # type: ignore[index]
            assert CHECK.is_valid(value)
            return value
        # tools: the call, the tool run in line, the answer.
        first = {"model": "bench", "messages": [USER], "tools": [TOOL_SPEC]}
        data = await self._post(json.dumps(first))
        message = data["choices"][0]["message"]  # type: ignore[index]
        call = message["tool_calls"][0]
        result = echo(**json.loads(call["function"]["arguments"]))
        second = {
            "model": "bench",
            "messages": [
                USER,
                message,
                {"role": "tool", "tool_call_id": call["id"], "content": result},
            ],
            "tools": [TOOL_SPEC],
        }
        data = await self._post(json.dumps(second))
        return data["choices"][0]["message"]["content"]  # type: ignore[index]

    async def _block(self, calls: int) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            assert await self._one() in ("pong", {"label": "billing"})
        return time.perf_counter() - start

    def block(self, calls: int) -> float:
        return self.loop.run_until_complete(self._block(calls))

    def close(self) -> None:
        if isinstance(self.session, aiohttp.ClientSession):
            self.loop.run_until_complete(self.session.close())
        else:
            self.loop.run_until_complete(self.session.aclose())
        self.loop.close()


class Exec:
    """The same exchanges through ``Runtime.exec``, one path's arguments fixed."""

    def __init__(self, runtime: Runtime, path: str = "plain") -> None:
        self.runtime = runtime
        # The tool kind a compiled agent's ``python:`` tool is (this file is its project).
        here = Path(__file__).parent
        tool = PythonTool("echo", None, None, "per_call:echo", here)
        atool = PythonTool("echo", None, None, "per_call:aecho", here)
        self.call: Callable[[], object] = {
            "plain": lambda: runtime.exec("ping"),
            "schema": lambda: runtime.exec("ping", response_format=SCHEMA),
            "tools": lambda: runtime.exec("ping", tools=[tool]),
            "async_tool": lambda: runtime.exec("ping", tools=[atool]),
        }[path]

    def block(self, calls: int) -> float:
        call = self.call
        start = time.perf_counter()
        for _ in range(calls):
            assert call() in ("pong", {"label": "billing"})
        return time.perf_counter() - start

    def close(self) -> None:
        self.runtime.close()


class AsyncExec:
    """The same calls through ``Runtime.async_exec``, awaited one after another on a loop of
    this side's own, as the bare side runs: the figure without the sync face's loop entry
    (each sync ``exec`` enters and leaves the loop once; the bare side runs 100 calls a
    loop run)."""

    def __init__(self, runtime: Runtime, path: str = "plain") -> None:
        self.loop = asyncio.new_event_loop()
        self.runtime = runtime
        here = Path(__file__).parent
        tool = PythonTool("echo", None, None, "per_call:echo", here)
        atool = PythonTool("echo", None, None, "per_call:aecho", here)
        self.options: dict[str, Any] = {
            "plain": {},
            "schema": {"response_format": SCHEMA},
            "tools": {"tools": [tool]},
            "async_tool": {"tools": [atool]},
        }[path]

    async def _block(self, calls: int) -> float:
        runtime, options = self.runtime, self.options
        start = time.perf_counter()
        for _ in range(calls):
            # max_iterations=20: what exec() passes (async_exec's default is no cap).
            result = await runtime.async_exec("ping", max_iterations=20, **options)
            assert result in ("pong", {"label": "billing"})
        return time.perf_counter() - start

    def block(self, calls: int) -> float:
        return self.loop.run_until_complete(self._block(calls))

    def close(self) -> None:
        self.loop.close()


PROJECT = {
    "openprogram.yaml": """\
version: 1
agents: [agents/*.yaml]
providers:
  bench: {runtime: openai, base_url: "%(url)s"}
""",
    "bench_tools.py": (
        "def echo(text: str) -> str:\n    return text\n\n\n"
        "async def aecho(text: str) -> str:\n    return text\n"
    ),
    "agents/bench.yaml": """\
version: 1
name: bench
model: bench:bench
tools:
  echo: {python: "bench_tools:echo"}
  aecho: {python: "bench_tools:aecho"}
methods:
  plain: {inputs: {q: {type: string}}, prompt: "{{ q }}", toolset: none}
  schema:
    inputs: {q: {type: string}}
    prompt: "{{ q }}"
    toolset: none
    response_schema: %(schema)s
  tools: {inputs: {q: {type: string}}, prompt: "{{ q }}", tools_allow: [echo]}
  async_tool: {inputs: {q: {type: string}}, prompt: "{{ q }}", tools_allow: [aecho]}
""",
}


class Method:
    """The same exchanges as a compiled agent's method run the way a batch runs its rows:
    ``execute_run`` with the runtimes of the program's version shared between runs."""

    def __init__(self, folder: Path, url: str, path: str) -> None:
        from openprogram_yaml.compile.project import compile_path
        from openprogram_yaml.run.shared_runtimes import SharedRuntimes
        from openprogram_yaml.run.version import VersionStamp

        for name, text in PROJECT.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text % {"url": url, "schema": json.dumps(SCHEMA)})
        self.program = compile_path(folder)
        self.stamp = VersionStamp(self.program.version)
        self.runtimes = SharedRuntimes()
        self.shared = self.runtimes.acquire(self.program)
        self.path = path
        self.loop = asyncio.new_event_loop()

    async def _block(self, calls: int) -> float:
        from openprogram_yaml.run.execute import execute_run

        start = time.perf_counter()
        for _ in range(calls):
            record = await execute_run(
                self.program, self.stamp, "bench", self.path, {"q": "ping"}, shared=self.shared
            )
            assert record.output in ("pong", {"label": "billing"}), record.error
        return time.perf_counter() - start

    def block(self, calls: int) -> float:
        return self.loop.run_until_complete(self._block(calls))

    def close(self) -> None:
        self.loop.run_until_complete(self.runtimes.release(self.shared))
        self.loop.run_until_complete(self.runtimes.aclose())
        self.loop.close()


def one_round(
    sides: dict[str, Bare | Exec | AsyncExec | Method], calls: int, block: int = 100
) -> dict[str, float]:
    """Seconds per call for each side; the sides take turns, ``block`` calls at a time, so
    that noise from the rest of the machine falls on all of them alike."""
    totals = dict.fromkeys(sides, 0.0)
    for side in sides.values():  # warm: connections, first-use imports
        side.block(10)
    done = 0
    while done < calls:
        n = min(block, calls - done)
        for name, side in sides.items():
            totals[name] += side.block(n)
        done += n
    return {name: total / calls for name, total in totals.items()}


PATH_NAMES = {
    "plain": "plain text",
    "schema": "response schema",
    "tools": "tool round trip",
    "async_tool": "async tool round trip",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-httpx", action="store_true", help="skip the httpx comparison")
    parser.add_argument(
        "--paths", default="plain,schema,tools,async_tool", help="which paths to time"
    )
    args = parser.parse_args()
    n = args.calls
    paths = [p for p in args.paths.split(",") if p]
    figures: dict[str, list[float]] = {}
    with chat_server(latency_ms=0) as url, tempfile.TemporaryDirectory() as tmp:
        selector = RuntimeSelector(rules=[RuntimeRule("openai:*", "openai", {"base_url": url})])
        runtime = Runtime(model="openai:bench", runtimes=selector)
        sides: dict[str, Bare | Exec | AsyncExec | Method] = {}
        for path in paths:
            sides[f"aiohttp/{path}"] = Bare(url, "aiohttp", path)
            sides[f"exec/{path}"] = Exec(runtime, path)
            sides[f"async_exec/{path}"] = AsyncExec(runtime, path)
            sides[f"method/{path}"] = Method(Path(tmp) / path, url, path)
        if "schema" in paths:
            sides["aiohttp/schema_checked"] = Bare(url, "aiohttp", "schema_checked")
        if not args.no_httpx and "plain" in paths:
            sides["httpx"] = Bare(url, "httpx")
            sides["exec_httpx"] = Exec(
                Runtime(
                    model="openai:bench",
                    runtimes=OpenAIRuntime(base_url=url, transport=httpx.AsyncHTTPTransport()),
                )
            )
        for _ in range(args.rounds):
            for name, value in one_round(sides, n).items():
                figures.setdefault(name, []).append(value)
        for name, side in sides.items():
            if not name.startswith("exec/"):
                side.close()
        runtime.close()
    ms = {k: median(v) * 1000 for k, v in figures.items() if v}
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"per_call: {n} sequential calls a path, median of {args.rounds} rounds (ms per call); "
        f"load average {load} (a shared machine: other work runs beside)"
    )
    for path in paths:
        bare = figures[f"aiohttp/{path}"]
        label = PATH_NAMES[path]
        report(f"{label}: bare aiohttp", f"{ms[f'aiohttp/{path}']:.3f} ms", "(baseline)")
        for side, what in (("exec", "Runtime.exec"), ("method", "compiled method (batch)")):
            ours = figures[f"{side}/{path}"]
            ratio = median([e / a for e, a in zip(ours, bare, strict=True)])
            report(
                f"{label}: {what}",
                f"{ms[f'{side}/{path}']:.3f} ms {ratio:.2f}x",
                "<= 1.3x",
                ratio <= 1.3,
            )
        ours = figures[f"async_exec/{path}"]
        ratio = median([e / a for e, a in zip(ours, bare, strict=True)])
        report(
            f"{label}: Runtime.async_exec",
            f"{ms[f'async_exec/{path}']:.3f} ms {ratio:.2f}x",
            "(the async face, beside the goal of exec)",
        )
    if "aiohttp/schema_checked" in figures:
        checked = figures["aiohttp/schema_checked"]
        ratio = median([e / a for e, a in zip(figures["exec/schema"], checked, strict=True)])
        report(
            "response schema: bare, body + check a call",
            f"{ms['aiohttp/schema_checked']:.3f} ms",
            "(beside the baseline)",
        )
        report(
            "response schema: Runtime.exec / that side",
            f"{ratio:.2f}x",
            "(for comparison; the goal is against the baseline)",
        )
    if "httpx" in ms:
        report("bare httpx (default transport)", f"{ms['httpx']:.3f} ms", "(for comparison)")
        r2 = median(
            [e / a for e, a in zip(figures["exec_httpx"], figures["aiohttp/plain"], strict=True)]
        )
        report(
            "Runtime.exec over httpx default / aiohttp",
            f"{ms['exec_httpx']:.3f} ms {r2:.2f}x",
            "(for comparison)",
        )


if __name__ == "__main__":
    main()
