"""Switching telemetry on from the command line, and the OTLP/HTTP export to a receiver on
127.0.0.1 that decodes what it gets with opentelemetry-proto."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import TracebackType

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from otel_helpers import write_desk

from openprogram_yaml import telemetry
from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.runner.cli import main


class Receiver:
    """An OTLP/HTTP traces endpoint on 127.0.0.1 (aiohttp on a thread of its own, since
    the exporter posts synchronously from the thread that flushes)."""

    def __init__(self) -> None:
        self.exports: list[ExportTraceServiceRequest] = []
        self.content_types: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.url = ""

    async def _traces(self, request: web.Request) -> web.Response:
        self.content_types.append(request.content_type)
        self.exports.append(ExportTraceServiceRequest.FromString(await request.read()))
        body = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    async def _start(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> Receiver:
        self._thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def spans(self) -> list[tuple[str, dict[str, object], dict[str, object]]]:
        """Every span received: its name, attributes and its resource's attributes."""
        out: list[tuple[str, dict[str, object], dict[str, object]]] = []
        for export in self.exports:
            for resource_spans in export.resource_spans:
                resource = _attributes(resource_spans.resource.attributes)
                for scope in resource_spans.scope_spans:
                    out.extend((s.name, _attributes(s.attributes), resource) for s in scope.spans)
        return out


def _attributes(pairs: list[KeyValue]) -> dict[str, object]:
    out: dict[str, object] = {}
    for pair in pairs:
        kind = pair.value.WhichOneof("value")
        out[pair.key] = getattr(pair.value, kind) if kind is not None else None
    return out


def test_a_cli_run_exports_its_spans_over_otlp_http_when_the_endpoint_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_desk(tmp_path)
    version = compile_path(path).version
    with Receiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        # The spans are sent when the command ends (the batch is flushed then): no waiting.
        assert main([str(path), "ask", "-i", "ticket=T-17"]) == 0
        assert telemetry.active() is None
        first = receiver.spans()
        monkeypatch.setenv("OTEL_SERVICE_NAME", "desk-service")
        assert main([str(path), "ask", "-i", "ticket=T-18", "--otel"]) == 0
        second = receiver.spans()[len(first) :]
    assert receiver.content_types and set(receiver.content_types) == {"application/x-protobuf"}
    names = [name for name, _, _ in first]
    assert sorted(names) == ["chat test", "desk.ask", "execute_tool lookup", "invoke_agent desk"]
    run = next(attrs for name, attrs, _ in first if name == "invoke_agent desk")
    assert run["openprogram.version.hash"] == version
    assert run["gen_ai.agent.name"] == "desk"
    chat = next(attrs for name, attrs, _ in first if name == "chat test")
    assert chat["gen_ai.operation.name"] == "chat"
    assert isinstance(chat["gen_ai.usage.input_tokens"], int) and chat["gen_ai.usage.input_tokens"]
    assert "gen_ai.input.messages" not in chat
    assert {resource["service.name"] for _, _, resource in first} == {"openprogram"}
    assert len(second) == 4
    assert {resource["service.name"] for _, _, resource in second} == {"desk-service"}


def _run_cli(
    tmp_path: Path, args: list[str], env: dict[str, str], *, block_otel: bool
) -> tuple[dict[str, object], str]:
    """Run the command line in a fresh interpreter; say its exit status and whether it
    imported opentelemetry. ``block_otel``: as if the extra were not installed."""
    script = (
        "import json, sys\n"
        "from openprogram_yaml.runner.cli import main\n"
        f"code = main({args!r})\n"
        "print(json.dumps({'code': code, 'otel': 'opentelemetry' in sys.modules}))\n"
    )
    paths = [str(Path(__file__).parents[2])]
    if block_otel:
        blocker = tmp_path / "no-otel" / "opentelemetry"
        blocker.mkdir(parents=True)
        (blocker / "__init__.py").write_text("raise ImportError('No module named opentelemetry')")
        paths.insert(0, str(blocker.parent))
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env={**clean, **env, "PYTHONPATH": os.pathsep.join(paths)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = proc.stdout.strip().splitlines()
    assert lines, proc.stderr
    result: dict[str, object] = json.loads(lines[-1])
    return result, proc.stderr


def test_otel_without_the_extra_is_a_usage_error_that_says_what_to_install(
    tmp_path: Path,
) -> None:
    path = write_desk(tmp_path)
    result, stderr = _run_cli(
        tmp_path, [str(path), "ask", "-i", "ticket=t", "--otel"], {}, block_otel=True
    )
    assert result["code"] == 2
    assert "pip install 'openprogram-yaml[otel]'" in stderr
    assert "Traceback" not in stderr


def test_only_the_endpoint_set_without_the_extra_warns_once_and_runs(tmp_path: Path) -> None:
    path = write_desk(tmp_path)
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    result, stderr = _run_cli(tmp_path, [str(path), "ask", "-i", "ticket=t"], env, block_otel=True)
    assert result["code"] == 0
    warnings = [line for line in stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "openprogram-yaml[otel]" in warnings[0]


def test_with_telemetry_off_a_run_imports_nothing_of_opentelemetry(tmp_path: Path) -> None:
    path = write_desk(tmp_path)
    result, stderr = _run_cli(tmp_path, [str(path), "ask", "-i", "ticket=t"], {}, block_otel=False)
    assert result == {"code": 0, "otel": False}, stderr
