"""What a run tells its observer while it goes (``execute_run(on_event=…)``).

Every event is a JSON object with a ``type``; front ends (server-sent events, the chat
terminal, the web page) show them as they come. The runtime sends the first six; the run
sends ``method``, ``pick`` and ``fallback``:

- ``text`` / ``thinking`` ``{text}``: a piece of the model's answer (streamed when the
  runtime streams, else the whole answer at once);
- ``tool_use`` ``{id, name, arguments}`` and ``tool_result`` ``{id, name, content, is_error}``;
- ``retry`` ``{attempt, max_retries, delay_s, reason, message, http_status}``: a model call
  failed and is tried again; what that attempt streamed is void;
- ``structured_output_retry`` ``{attempt, code, issues}``: the reply did not match the
  response schema and the model is asked to repair it;
- ``method`` ``{agent, method}``: a method starts (the first, or one a pick continues with);
- ``pick`` ``{agent, method, choice, fields?}``: the model picked ``choice`` of ``choices``;
- ``fallback`` ``{method, model, reason, http_status, attempts, message, next}``: ``model``
  failed for good and ``next`` gets the same call (``run.fallback``).

Observers must be quick and must not raise; an observer that raises is ignored.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from ..json_types import JSONObject

__all__ = ["EVENT_TYPES", "Observer", "emit"]

Observer = Callable[[JSONObject], None]

EVENT_TYPES = (
    "text",
    "thinking",
    "tool_use",
    "tool_result",
    "retry",
    "structured_output_retry",
    "method",
    "pick",
    "fallback",
)


def emit(observer: Observer | None, event: JSONObject) -> None:
    """Tell ``observer`` of ``event``; an observer that raises never breaks the run."""
    if observer is not None:
        with contextlib.suppress(Exception):
            observer(event)
