"""Opening the ``Runtime`` an agent's runs use: its model, retry policy, tools and runtime
rules, with its methods offered as tools, and everything it opened closed again (or left
open, when the selector is shared by the runs of a version: ``run.shared_runtimes``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..runtime import Runtime
from ..runtime.asking import ask_user_tool
from ..runtimes.protocol import RuntimeSelectorProtocol, SelectorWrapper
from ..runtimes.select import RuntimeSelector
from .fallback import models_for
from .method import method_tool

if TYPE_CHECKING:
    from ..compile.program import Agent
    from ..json_types import JSONObject
    from ..runtime import SessionTrace
    from ..runtime.asking import Asker
    from ..runtime.retry import RetryInfo
    from ..runtime.toolgate import ToolGate

__all__ = ["OpenRuntime", "close_tools", "open_runtime", "selector_for", "server_tools"]


def selector_for(agent: Agent) -> RuntimeSelector:
    """The runtime selector the agent's ``runtimes:`` rules and providers describe."""
    return RuntimeSelector(
        rules=agent.runtime_rules,
        providers=agent.providers,
    )


async def close_tools(agent: Agent) -> None:
    """Close the clients the agent's tools opened (the http tool's pool) and stop its MCP
    servers."""
    for tool in (*agent.tools, *agent.tool_servers):
        closer = getattr(tool, "aclose", None)
        if closer is not None:
            await closer()


async def server_tools(agent: Agent) -> list[object]:
    """The tools of the agent's MCP servers, each server started if it is not running (a
    ``ToolError`` naming the server if it cannot start: the run fails)."""
    found: list[object] = []
    for server in agent.tool_servers:
        found.extend(await server.tools())
    return found


async def _agent_tools(
    agent: Agent, selector: RuntimeSelectorProtocol, gate: ToolGate | None, model: str | None
) -> Sequence[object]:
    """The agent's tools, with its MCP servers'. A replay starts no server: it offers their
    tools as the recorded requests did, and the recordings answer their calls. Nor does an
    offline run (``_offline``): a server is a program of the repository's, or a server
    beyond this machine, and starting it is running it."""
    if not agent.tool_servers:
        return agent.tools
    from ..recording.replay import ReplaySelector

    if isinstance(selector, ReplaySelector):
        recorded = selector.recorded_tools()
        replayed = [tool for s in agent.tool_servers for tool in s.replayed_tools(recorded)]
        return [*agent.tools, *replayed]
    if _offline(agent, selector, gate, model):
        # Offered by name only (any arguments): the tools the toolsets, allow/deny lists and
        # the run's doubles name. Their calls are answered by a double or "not run".
        named = {name for s in agent.tool_servers for name, _ in s.expected}
        named |= set(gate.doubles if gate is not None else ())
        specs = [{"name": name} for name in sorted(named)]
        stand_ins = [tool for s in agent.tool_servers for tool in s.replayed_tools(specs)]
        return [*agent.tools, *stand_ins]
    return [*agent.tools, *await server_tools(agent)]


def _offline(
    agent: Agent, selector: RuntimeSelectorProtocol, gate: ToolGate | None, model: str | None
) -> bool:
    """Whether no call of an MCP tool can run: no live tools, and every model the run may
    turn to (``model``, else every method's and fallback of the agent: methods call one
    another) is served offline (the ``test`` model)."""
    if gate is not None and gate.live_tools:
        return False
    methods = agent.methods.values()
    models = {model} if model else {m for method in methods for m in models_for(agent, method)}
    try:
        return bool(models) and all(getattr(selector.select(m), "offline", False) for m in models)
    except Exception:  # a model no runtime serves: the run fails at its first turn anyway
        return False


def open_runtime(
    agent: Agent,
    *,
    shared: RuntimeSelectorProtocol | None = None,
    wrap_selector: SelectorWrapper | None = None,
    trace: SessionTrace | None = None,
    tool_gate: ToolGate | None = None,
    on_retry: Callable[[RetryInfo], object] | None = None,
    asker: Asker | None = None,
    on_event: Callable[[JSONObject], None] | None = None,
    model: str | None = None,
    tools: Sequence[object] | None = None,
) -> OpenRuntime:
    """A ``Runtime`` set up from ``agent``'s model, retry policy and runtime rules, for
    ``async with``.

    ``shared`` is a selector the runs of a version share (``VersionRuntimes.selector``):
    it is used and left open, and so are the agent's tools. Without it, the run opens the
    agent's own selector and closes it, with the clients of the agent's tools, at its end.
    ``wrap_selector`` may put something between the runtime and the selector (recording
    every turn, or replaying recorded ones); what it returns is closed on exit.
    ``asker`` answers questions and confirmations (None: nobody is there).
    ``on_event`` is told what happens as it happens (``run.events`` names the events).
    ``model`` is the run's model when it overrides the agent's (an offline run starts no
    MCP server). ``tools`` are ``agent.tools`` as made for the runs of a version
    (``VersionRuntimes.tools``); None: ``agent.tools``.
    """
    return OpenRuntime(
        agent, shared, wrap_selector, trace, tool_gate, on_retry, asker, on_event, model, tools
    )


class OpenRuntime:
    """``open_runtime``'s context: the ``Runtime`` on entry, what it opened closed on exit.

    A class rather than ``contextlib.asynccontextmanager``: every run opens one, and the
    generator-based manager cost about 1 us more a run (its generator, hooks and ``athrow``).
    """

    __slots__ = (
        "agent",
        "asker",
        "model",
        "on_event",
        "on_retry",
        "runtime",
        "selector",
        "shared",
        "tool_gate",
        "tools",
        "trace",
        "wrap_selector",
    )

    def __init__(
        self,
        agent: Agent,
        shared: RuntimeSelectorProtocol | None,
        wrap_selector: SelectorWrapper | None,
        trace: SessionTrace | None,
        tool_gate: ToolGate | None,
        on_retry: Callable[[RetryInfo], object] | None,
        asker: Asker | None,
        on_event: Callable[[JSONObject], None] | None,
        model: str | None,
        tools: Sequence[object] | None = None,
    ) -> None:
        self.agent = agent
        self.shared = shared
        self.wrap_selector = wrap_selector
        self.trace = trace
        self.tool_gate = tool_gate
        self.on_retry = on_retry
        self.asker = asker
        self.on_event = on_event
        self.model = model
        self.tools = agent.tools if tools is None else tools
        self.selector: RuntimeSelectorProtocol | None = None
        self.runtime: Runtime | None = None

    async def __aenter__(self) -> Runtime:
        agent, shared = self.agent, self.shared
        selector: RuntimeSelectorProtocol = selector_for(agent) if shared is None else shared
        if self.wrap_selector is not None:
            selector = self.wrap_selector(selector)
        self.selector = selector
        try:
            tools = (
                await _agent_tools(agent, selector, self.tool_gate, self.model)
                if agent.tool_servers
                else self.tools
            )
            runtime = self.runtime = Runtime(
                model=agent.model or "default",
                max_retries=agent.retry.max_retries,
                backoff_base_s=agent.retry.backoff_base_s,
                runtimes=selector,
                tools=tools,
                toolsets=agent.toolsets,
                trace=self.trace,
                tool_gate=self.tool_gate,
                on_retry=self.on_retry,
                asker=self.asker,
                on_stream=self.on_event,
            )
            if agent.ask_user:
                runtime.register_tools(ask_user_tool(runtime.asking))
            if agent.method_tools:
                runtime.register_tools(
                    *(method_tool(name, m, runtime) for name, m in agent.method_tools.items())
                )
        except BaseException:
            # What was opened (the selector, MCP servers started for the tools, the Runtime)
            # is closed in reverse order before the error goes on.
            await self._close()
            raise
        return runtime

    async def __aexit__(self, *exc_info: object) -> None:
        await self._close()

    async def _close(self) -> None:
        """Close the run's ``Runtime`` (if it was made), then the selector and the agent's
        tools the run opened; the first close failing skips no other."""
        opened, selector = self.runtime, self.selector
        assert selector is not None
        try:
            if opened is not None:
                # Closes the selector it was given: the wrapper, and through it what it
                # wraps (a shared selector's lent view closes nothing).
                await opened.aclose()
            else:
                await selector.aclose()
        finally:
            if self.shared is None:
                try:
                    if opened is not None:
                        await selector.aclose()
                finally:
                    await close_tools(self.agent)
