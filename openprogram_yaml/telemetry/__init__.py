"""OpenTelemetry for runs: spans for the run, its methods, model calls and tool calls.

An optional extra (``pip install 'openprogram-yaml[otel]'``). A front end switches it on
for the process (``--otel``, or ``OTEL_EXPORTER_OTLP_ENDPOINT`` in the environment) with
``start``, and ``execute_run`` asks ``active()`` for it: when on, the run records a session
trace and the trace's observer turns each node into a span with the GenAI semantic
conventions (``telemetry.otel``, the one module that imports opentelemetry). When off,
nothing of opentelemetry is imported and a run does no extra work.

Prompts and completions are exported only when asked (``--otel-content``, or
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``); the run's secrets never are.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TextIO

from ..errors import UsageError

if TYPE_CHECKING:
    from ..runtime.trace import SessionTrace

__all__ = [
    "EXTRA_HINT",
    "RunTelemetry",
    "TelemetryRequest",
    "active",
    "requested",
    "start",
    "stop",
    "use",
]

EXTRA_HINT = "pip install 'openprogram-yaml[otel]'"

#: The GenAI conventions' switch for exporting prompts and completions.
CAPTURE_CONTENT_VAR = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


class RunTelemetry(Protocol):
    """What ``execute_run`` needs of telemetry: a trace for the run that is being watched."""

    def watch(self, trace: SessionTrace | None, secrets: frozenset[str]) -> SessionTrace:
        """``trace`` (or a new one) with an observer that exports the run's nodes as spans;
        ``secrets`` never appear in what is exported."""
        ...

    def shutdown(self) -> None:
        """Export what is pending and stop."""
        ...


@dataclass(frozen=True, slots=True)
class TelemetryRequest:
    """What the command line and the environment ask for."""

    #: Asked for by a flag: a missing extra is an error (not only a warning).
    explicit: bool
    #: Export prompts, completions, tool arguments and results (redacted).
    capture_content: bool


_active: RunTelemetry | None = None


def active() -> RunTelemetry | None:
    """The process's telemetry, or None when it is off (the default)."""
    return _active


def use(telemetry: RunTelemetry | None) -> RunTelemetry | None:
    """Make ``telemetry`` the process's (None: off); returns the one it replaces."""
    global _active
    previous, _active = _active, telemetry
    return previous


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def requested(
    otel: bool = False, content: bool = False, environ: Mapping[str, str] | None = None
) -> TelemetryRequest | None:
    """Whether telemetry is wanted: ``--otel`` (or ``--otel-content``, which implies it), or
    an OTLP endpoint in the environment; None when not, and whenever ``OTEL_SDK_DISABLED``
    is true (the SDK would make no spans then)."""
    env = os.environ if environ is None else environ
    if _true(env.get("OTEL_SDK_DISABLED")):
        return None
    capture = content or _true(env.get(CAPTURE_CONTENT_VAR))
    if otel or content:
        return TelemetryRequest(explicit=True, capture_content=capture)
    if env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return TelemetryRequest(explicit=False, capture_content=capture)
    return None


def start(request: TelemetryRequest | None, *, warn: TextIO | None = None) -> None:
    """Switch telemetry on for the process as ``request`` says (None: leave it off),
    exporting over OTLP/HTTP to the endpoint the environment names.

    Without the extra installed, a flag's request is a ``UsageError`` (exit 2); the
    environment's alone is one warning line on ``warn`` (stderr), and runs go on without.
    """
    if request is None:
        return
    try:
        from .otel import OTelTelemetry
    except ImportError as exc:
        why = f"OpenTelemetry is not installed ({exc}); {EXTRA_HINT}"
        if request.explicit:
            raise UsageError(f"--otel needs the otel extra: {why}") from None
        print(
            f"warning: OTEL_EXPORTER_OTLP_ENDPOINT is set but {why}; runs are not traced",
            file=sys.stderr if warn is None else warn,
        )
        return
    use(OTelTelemetry.to_otlp(capture_content=request.capture_content))


def stop() -> None:
    """Export what is pending and switch telemetry off (nothing happens when it is off)."""
    telemetry = use(None)
    if telemetry is not None:
        telemetry.shutdown()
