"""No secret in an OpenTelemetry span: not with content capture on, not when the model
server echoes the key back, not in the message of an error."""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path

import pytest
from loopback import LoopbackServer, Reply, Request, chat_completion, json_reply
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from openprogram_yaml import telemetry
from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.run.execute import execute_run
from openprogram_yaml.run.version import VersionStamp
from openprogram_yaml.telemetry.otel import OTelTelemetry

PROVIDER_KEY = "sk-loop-5ecret-9f8e7d6c5b"
SHOP_TOKEN = "tok-shop-5ecret-0a1b2c3d"

AGENT = """
version: 1
name: echo
model: local:llama3
retry: {max_retries: 1}
instructions: "You answer for the shop (token ${env:SHOP_TOKEN})."
runtimes: [{match: "local:*", runtime: openai, options: {base_url: "%s/v1"}}]
methods:
  say:
    inputs: {q: {type: string}}
    prompt: "Say: {{ q }}"
  label:
    inputs: {q: {type: string}}
    prompt: "Label: {{ q }}"
    response_schema:
      type: object
      required: [category]
      properties: {category: {type: string, enum: [bug, billing]}}
"""


def _echo_key(request: Request) -> Reply:
    """A 200 reply that repeats the credential the client sent (in the text, or as a value
    the schema refuses, so that the error is about it)."""
    key = request.headers.get("authorization", "")[7:]
    if "response_format" in request.json:
        return json_reply(chat_completion(json.dumps({"category": key})))
    return json_reply(chat_completion(f"You sent {key}; the shop token is {SHOP_TOKEN}."))


@pytest.mark.parametrize("method", ["say", "label"])
def test_spans_with_content_never_hold_a_key_or_secret_even_when_echoed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", PROVIDER_KEY)
    monkeypatch.setenv("SHOP_TOKEN", SHOP_TOKEN)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    previous = telemetry.use(OTelTelemetry(provider, capture_content=True))
    try:
        with LoopbackServer([_echo_key] * 4) as server:
            path = tmp_path / "echo.yaml"
            path.write_text(textwrap.dedent(AGENT % server.url), encoding="utf-8")
            program = compile_path(path)
            inputs = {"q": f"hi {SHOP_TOKEN}"}
            record = asyncio.run(
                execute_run(program, VersionStamp(program.version), None, method, inputs)
            )
    finally:
        telemetry.use(previous)
    assert record.status == ("ok" if method == "say" else "failed")
    spans = exporter.get_finished_spans()
    assert spans
    exported = "\n".join(
        [s.name for s in spans]
        + [str(v) for s in spans for v in (s.attributes or {}).values()]
        + [s.status.description or "" for s in spans]
    )
    assert PROVIDER_KEY not in exported and SHOP_TOKEN not in exported
    assert "***" in exported
