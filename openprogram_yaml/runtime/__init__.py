"""The runtime layer: ``Runtime.exec`` and what it applies around every model turn."""

from openprogram_yaml.runtime.callable import CallableRuntime
from openprogram_yaml.runtime.choices import Choice, ChoiceSet, normalize_choices
from openprogram_yaml.runtime.retry import (
    RecoveryBudget,
    RetryInfo,
    backoff_delay,
    classify_exception,
    classify_status,
    parse_retry_after,
    retry_after_from_headers,
)
from openprogram_yaml.runtime.runtime import Runtime
from openprogram_yaml.runtime.structured import (
    ResponseFormat,
    normalize_response_format,
    parse_json_strict,
)
from openprogram_yaml.runtime.terminal import UNSET
from openprogram_yaml.runtime.toolsets import Tool, ToolPolicy, ToolsetPreset
from openprogram_yaml.runtime.trace import SessionTrace, TraceNode

__all__ = [
    "UNSET",
    "CallableRuntime",
    "Choice",
    "ChoiceSet",
    "RecoveryBudget",
    "ResponseFormat",
    "RetryInfo",
    "Runtime",
    "SessionTrace",
    "Tool",
    "ToolPolicy",
    "ToolsetPreset",
    "TraceNode",
    "backoff_delay",
    "classify_exception",
    "classify_status",
    "normalize_choices",
    "normalize_response_format",
    "parse_json_strict",
    "parse_retry_after",
    "retry_after_from_headers",
]
