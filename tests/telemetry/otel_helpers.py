"""What the telemetry tests share: an agent with a tool, telemetry into memory, span trees."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from openprogram_yaml import telemetry
from openprogram_yaml.telemetry.otel import OTelTelemetry

#: A python tool of the project (python tools run under the offline `test` model).
TOOLS = '''
def lookup(ticket: str) -> str:
    """Look a ticket up."""
    return f"ticket {ticket} is open"
'''

#: The offline `test` model calls ``lookup`` on its first turn, then answers.
AGENT = """
version: 1
name: desk
model: test
tools:
  lookup:
    python: desk_otel_tools:lookup
methods:
  ask:
    inputs: {ticket: {type: string}}
    prompt: "Look up {{ ticket }}"
"""


def write_desk(root: Path, agent: str = AGENT) -> Path:
    (root / "desk_otel_tools.py").write_text(TOOLS, encoding="utf-8")
    path = root / "desk.yaml"
    path.write_text(agent.lstrip("\n"), encoding="utf-8")
    return path


@contextmanager
def spans_in_memory(*, capture_content: bool = False) -> Iterator[InMemorySpanExporter]:
    """Telemetry switched on for the block, every span kept in memory as it ends."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    previous = telemetry.use(OTelTelemetry(provider, capture_content=capture_content))
    try:
        yield exporter
    finally:
        telemetry.use(previous)
        provider.shutdown()


def tree(spans: Sequence[ReadableSpan]) -> list[str]:
    """The spans in start order, each name indented by its depth."""
    by_id = {s.context.span_id: s for s in spans if s.context is not None}

    def depth(span: ReadableSpan) -> int:
        n = 0
        while span.parent is not None and span.parent.span_id in by_id:
            span = by_id[span.parent.span_id]
            n += 1
        return n

    ordered = sorted(spans, key=lambda s: s.start_time or 0)
    return ["  " * depth(s) + s.name for s in ordered]


def named(spans: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


def everything_exported(spans: Sequence[ReadableSpan]) -> str:
    """Every name, attribute value and status description, as one text to search."""
    parts: list[str] = []
    for span in spans:
        parts.append(span.name)
        parts.extend(str(v) for v in (span.attributes or {}).values())
        parts.append(span.status.description or "")
    return "\n".join(parts)
