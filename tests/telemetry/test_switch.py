"""When telemetry is wanted, and whether prompts and completions go with it."""

from __future__ import annotations

from openprogram_yaml.telemetry import TelemetryRequest, requested

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
CONTENT = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}


def test_off_unless_a_flag_or_an_endpoint_asks() -> None:
    assert requested(environ={}) is None
    assert requested(environ=CONTENT) is None  # the content switch alone turns nothing on
    assert requested(otel=True, environ={}) == TelemetryRequest(True, False)
    assert requested(environ=ENDPOINT) == TelemetryRequest(False, False)
    traces_only = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}
    assert requested(environ=traces_only) == TelemetryRequest(False, False)


def test_content_is_asked_by_the_conventions_switch_or_the_flag_which_implies_otel() -> None:
    assert requested(environ={**ENDPOINT, **CONTENT}) == TelemetryRequest(False, True)
    assert requested(otel=True, environ=CONTENT) == TelemetryRequest(True, True)
    assert requested(content=True, environ={}) == TelemetryRequest(True, True)
    no = {**ENDPOINT, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "false"}
    assert requested(environ=no) == TelemetryRequest(False, False)


def test_the_sdks_disabled_switch_turns_it_off_flags_or_not() -> None:
    disabled = {**ENDPOINT, "OTEL_SDK_DISABLED": "true"}
    assert requested(environ=disabled) is None
    assert requested(otel=True, content=True, environ=disabled) is None
