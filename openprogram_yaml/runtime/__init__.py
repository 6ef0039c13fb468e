"""The ``Runtime`` class: ``exec`` / ``async_exec`` and what it applies around every turn.

Not to be confused with ``runtimes/`` (plural), the protocol every model runtime implements
and the registry that finds them. Here, around whichever runtime answers: the exec loop
(``runtime``, ``engine``), retries and the recovery budget (``retry``), structured output and
its repair (``structured``, ``validation``), the tool loop and tool policy (``toolloop``,
``toolsets``, ``toolgate``), ``choices`` (the pick's text and menu in ``pick_text``, option
fields in ``option_schema``), how a turn ends (``turn_end``) and the session
trace (``trace``).

Names load on first use, as in the top-level package: importing one module of this
package (``runtime.validation``, say, while compiling) does not import them all, and a run
loads ``choices`` only when a method picks.
"""

from __future__ import annotations

from openprogram_yaml._lazy import lazy_exports

# Not from `typing`: mypy reads TYPE_CHECKING by name.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from openprogram_yaml.runtime.callable import CallableRuntime
    from openprogram_yaml.runtime.choices import Choice, ChoiceSet, normalize_choices
    from openprogram_yaml.runtime.retry import RecoveryBudget, RetryInfo, backoff_delay
    from openprogram_yaml.runtime.runtime import Runtime
    from openprogram_yaml.runtime.structured import (
        JsonSchemaOutput,
        normalize_response_format,
        parse_json_strict,
    )
    from openprogram_yaml.runtime.toolsets import Tool, ToolPolicy, ToolsetPreset
    from openprogram_yaml.runtime.trace import SessionTrace, TraceNode
    from openprogram_yaml.runtime.turn_end import UNSET
    from openprogram_yaml.runtimes.protocol import RuntimeDelta, RuntimeResult

_EXPORTS: dict[str, str] = {
    "UNSET": "turn_end",
    "CallableRuntime": "callable",
    "Choice": "choices",
    "ChoiceSet": "choices",
    "normalize_choices": "choices",
    "RecoveryBudget": "retry",
    "RetryInfo": "retry",
    "backoff_delay": "retry",
    "JsonSchemaOutput": "structured",
    "normalize_response_format": "structured",
    "parse_json_strict": "structured",
    "Runtime": "runtime",
    "SessionTrace": "trace",
    "TraceNode": "trace",
    "Tool": "toolsets",
    "ToolPolicy": "toolsets",
    "ToolsetPreset": "toolsets",
    # The seed's deep path (``praisonaiagents.runtime.RuntimeResult``): a custom runtime's
    # result types, defined with the protocol in ``runtimes/protocol`` (relative to here).
    "RuntimeDelta": ".runtimes.protocol",
    "RuntimeResult": ".runtimes.protocol",
}

__all__ = [
    "UNSET",
    "CallableRuntime",
    "Choice",
    "ChoiceSet",
    "JsonSchemaOutput",
    "RecoveryBudget",
    "RetryInfo",
    "Runtime",
    "RuntimeDelta",
    "RuntimeResult",
    "SessionTrace",
    "Tool",
    "ToolPolicy",
    "ToolsetPreset",
    "TraceNode",
    "backoff_delay",
    "normalize_choices",
    "normalize_response_format",
    "parse_json_strict",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
