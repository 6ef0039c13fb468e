"""``ExecRequest``: one exec's options as one value.

``Runtime.exec`` / ``async_exec`` keep the seed's signature (nineteen parameters); past it,
the options travel together, so preparing, tracing and checking an exec read one object
instead of re-listing every parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from openprogram_yaml.json_types import JSONObject
from openprogram_yaml.runtime.callable import CallFn
from openprogram_yaml.runtime.retry import RetryInfo
from openprogram_yaml.runtime.turn_end import UNSET, Unset
from openprogram_yaml.runtimes.protocol import AgentRuntimeProtocol, Message

__all__ = ["ExecRequest"]


@dataclass(slots=True)
class ExecRequest:
    """What ``async_exec`` was asked for (``context``, legacy and ignored, is left out).

    Made on every exec and read only after: not ``frozen``, whose ``__init__`` sets each of
    the nineteen fields through ``object.__setattr__`` (1.7 us against 0.3 us a call).
    """

    content: str | Sequence[object]
    response_format: object = None
    model: str | None = None
    tools: Sequence[object] | None = None
    toolset: str | None = None
    tools_source: Sequence[str] | None = None
    tools_allow: Sequence[str] | None = None
    tools_deny: Sequence[str] | None = None
    tool_choice: str | JSONObject | Unset = UNSET
    parallel_tool_calls: bool | Unset = UNSET
    #: None: no cap (``async_exec``'s default in the seed; ``exec`` passes 20).
    max_iterations: int | None = 20
    choices: object = None
    timeout_s: float | None = None
    on_retry: Callable[[RetryInfo], object] | None = None
    web_search: bool = False
    #: A runtime (``.run_turn``) or a callable answering every turn of this exec.
    stream_fn: AgentRuntimeProtocol | CallFn | None = None
    max_validation_retries: int | None = None
    model_options: Mapping[str, object] | None = None
    #: The conversation before ``content`` (a chat session's earlier turns).
    history: tuple[Message, ...] = ()

    def traced_options(self) -> dict[str, object]:
        """The options as the session trace records them (``None`` for unset ones)."""
        choices = self.choices
        if isinstance(choices, Iterable) and not isinstance(choices, list):
            choices = list(choices)  # a mapping's option names
        return {
            "response_format": self.response_format,
            "choices": choices,
            "model": self.model,
            "tools": None if self.tools is None else [getattr(t, "name", t) for t in self.tools],
            "toolset": self.toolset,
            "tools_allow": self.tools_allow,
            "tools_deny": self.tools_deny,
            "tool_choice": None if isinstance(self.tool_choice, Unset) else self.tool_choice,
            "parallel_tool_calls": None
            if isinstance(self.parallel_tool_calls, Unset)
            else self.parallel_tool_calls,
            "max_iterations": self.max_iterations,
            "timeout_s": self.timeout_s,
            "web_search": self.web_search,
            "model_options": dict(self.model_options or {}),
        }
