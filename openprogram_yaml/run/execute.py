"""Turning a ``Program`` plus inputs into a ``RunRecord``: the one way every front end
(the command line, ``--watch``, ``serve``, ``test``) runs a method."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..errors import OpenProgramError, UsageError
from ..json_types import JSONObject, JSONValue
from ..runtime.toolgate import ToolGate
from ..telemetry import active as active_telemetry
from .agent_runtime import open_runtime
from .costs import CostMeter
from .fallback import models_for
from .method import DEFAULT_MAX_STEPS, RunState, run_method
from .record import RunRecord, error_dict, run_secrets
from .version import VersionStamp

if TYPE_CHECKING:
    from ..compile.program import Program
    from ..runtime.asking import Asker
    from ..runtime.retry import RetryInfo
    from ..runtime.toolgate import ToolDouble
    from ..runtime.trace import SessionTrace
    from ..runtimes.protocol import Message, SelectorWrapper
    from .shared_runtimes import VersionRuntimes

__all__ = ["execute_run"]


async def execute_run(
    program: Program,
    stamp: VersionStamp,
    agent_name: str | None,
    method_name: str | None,
    inputs: Mapping[str, JSONValue],
    *,
    model: str | None = None,
    trace: SessionTrace | None = None,
    shared: VersionRuntimes | None = None,
    wrap_selector: SelectorWrapper | None = None,
    live_tools: bool = False,
    tool_doubles: Mapping[str, tuple[ToolDouble, ...]] | None = None,
    on_retry: Callable[[RetryInfo], object] | None = None,
    asker: Asker | None = None,
    approve_all: bool = False,
    on_event: Callable[[JSONObject], None] | None = None,
    history: Sequence[Message] = (),
    exported: bool = True,
) -> RunRecord:
    """Run one method of ``program`` and describe the outcome; never raises for a failed run.

    Under the offline ``test`` model no http or command tool runs for real unless
    ``live_tools``; ``tool_doubles`` answer for the tools they name instead of running them.
    ``shared`` holds the runtimes the runs of ``program``'s version share (``RunService``);
    without it the run opens its own and closes them at its end.
    ``wrap_selector`` may put something between the runtime and its selector (recording,
    replay), for this run only: a shared selector behind it stays open.
    ``on_retry`` is told of every retry of a model call. ``asker`` puts questions
    and tool confirmations to the person (None: nobody is there, so a tool declared
    ``confirm`` is refused); ``approve_all`` (``--yes``) approves every confirmation.
    ``on_event`` is told what happens while the run goes (``run.events``); it is never
    told of the record, which the caller has. ``history`` is a chat session's conversation
    so far (``run.sessions``), sent to the model before the method's prompt. ``exported``
    False keeps the run out of telemetry (a render, which sends nothing, is no run).

    A cancelled run (shutdown after the grace period) ends as an ``interrupted`` record, so
    callers always get a record to write.
    """
    record = RunRecord(
        agent=agent_name or "",
        method=method_name or "",
        inputs=dict(inputs),
        version=stamp,
        started_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
    )
    started = time.perf_counter()
    try:
        agent = program.agent(agent_name)
        record.agent = agent.name
        record.secrets = run_secrets(agent) if shared is None else shared.secrets(agent)
        telemetry = active_telemetry() if exported else None
        if telemetry is not None:  # on: the run is traced, and its trace exported
            trace = telemetry.watch(trace, record.secrets)
        method = agent.method(method_name or None)
        record.method = method.name
        models = models_for(agent, method, model)
        record.model = models[0] if models else None
        if not record.model:
            raise UsageError(
                f"no model for agent '{agent.name}': set 'model:' in {agent.path.name} "
                "or pass a model"
            )
        state = RunState(method.options.max_steps or DEFAULT_MAX_STEPS, models=models)
        record.path = state.path
        record.fallbacks = state.fallbacks
        meter = CostMeter(method.options.max_cost_usd or agent.max_cost_usd)
        gate = ToolGate(live_tools=live_tools, doubles=tool_doubles or {}, approve_all=approve_all)
        record.tools_not_run = gate.not_run
        record.confirmations = gate.confirmations
        async with open_runtime(
            agent,
            shared=None if shared is None else shared.selector(agent),
            trace=trace,
            wrap_selector=wrap_selector,
            tool_gate=gate,
            on_retry=on_retry,
            asker=asker,
            on_event=on_event,
            model=model,
            tools=None if shared is None else shared.tools(agent),
        ) as runtime:
            runtime.meter = meter
            try:
                if trace is None:
                    record.output = await run_method(
                        method, runtime, inputs, model=record.model, state=state, history=history
                    )
                else:
                    # The trace's root names the version of the prompts the run used.
                    with trace.span("run", f"{agent.name}.{method.name}", dict(inputs)) as node:
                        node.data["version"] = stamp.to_dict()
                        node.data["model"] = record.model
                        record.output = await run_method(
                            method,
                            runtime,
                            inputs,
                            model=record.model,
                            state=state,
                            history=history,
                        )
                        node.output = record.output
            finally:
                record.usage = runtime.total_usage.to_dict()
                record.cost = meter.to_dict()
    except asyncio.CancelledError:
        record.status = "interrupted"
        record.error = {"type": "Interrupted", "message": "the runner stopped before the run ended"}
        record.exit_code = 130
    except OpenProgramError as exc:
        record.status = "failed"
        record.error = error_dict(exc)
        record.exit_code = exc.exit_code
    except Exception as exc:  # a tool or plugin bug: report it in the record, keep serving
        record.status = "failed"
        record.error = error_dict(exc)
        record.exit_code = 1
    record.elapsed_s = round(time.perf_counter() - started, 3)
    return record
