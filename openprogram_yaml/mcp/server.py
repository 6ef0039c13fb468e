"""The MCP server of a prompt repository: methods as tools, their prompts as prompts.

Built on the SDK's low-level ``Server`` (handlers for the four list/call/get requests):
the tools and prompts change with every reload, which the decorator-style ``MCPServer``
registers one by one. Every tool call runs through ``RunService``, the run path of every
front end (records, shared runtimes, the version each run started on); every prompt is
rendered by ``render_method``, the same templates a run sends, stopped before the model.

A reload that changes what a client sees of the tools or the prompts tells every client:
those on the 2025 handshake protocol get ``notifications/tools/list_changed`` (and
``prompts/list_changed``) on their connection; those on 2026-07-28 get them on the
``subscriptions/listen`` streams they opened (the SDK's ``ListenHandler`` and bus).

Nothing a client gets carries a secret: results, errors, progress and prompts are redacted
with the secrets of the run's agent (``run_secrets``: its ``${env:…}`` values, keys, and
secret-looking environment variables) and the token; a reload notice with every agent's.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.server import NotificationOptions, Server
from mcp.server.context import ServerRequestContext
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ToolsListChanged,
)
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .._version import __version__
from ..redaction import redact
from ..run.record import RunRecord, run_secrets
from ..run.render import render_method
from .asking import CALLER, Caller, can_elicit
from .catalog import Catalog, MethodRef, arguments_to_inputs, unfit_arguments
from .progress import RunProgress, wants_progress

if TYPE_CHECKING:
    from ..compile.program import Program
    from ..run.reload import ProgramHolder, ReloadEvent
    from ..run.service import RunService

__all__ = ["RUN_META_KEY", "RepositoryServer"]

#: The ``_meta`` key of a tool result naming the run behind it (its record's id, version).
RUN_META_KEY = "openprogram/run"

#: Legacy connections remembered for change notifications; the oldest is dropped beyond it
#: (a long-lived HTTP server sees sessions come and go without always hearing them end).
MAX_LEGACY_CONNECTIONS = 1000

_LOG = logging.getLogger("openprogram_yaml.mcp")


class RepositoryServer:
    """Serves the Program ``holder`` keeps current; runs go through ``service``."""

    def __init__(
        self,
        holder: ProgramHolder,
        service: RunService,
        *,
        model: str | None = None,
        server_secrets: frozenset[str] = frozenset(),
    ) -> None:
        self.holder = holder
        self.service = service
        #: The model every run and render uses instead of the method's (``--model``).
        self.model = model
        #: The server's own secrets (the token).
        self.server_secrets = server_secrets
        self.bus = InMemorySubscriptionBus()
        self.listen = ListenHandler(self.bus)
        #: Connections on the handshake protocol, by session id ("stdio": the one pipe),
        #: each with a session of theirs whose standalone channel carries notifications.
        self._legacy: dict[str, ServerSession] = {}
        self._catalog: Catalog | None = None
        self._announcing: set[asyncio.Task[None]] = set()
        self.server: Server[Any] = _ChangingListsServer(
            "openprogram",
            version=__version__,
            instructions="Methods of a versioned prompt repository: call one as a tool, "
            "or get its prompt, rendered by the repository's templates.",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_prompts=self._list_prompts,
            on_get_prompt=self._get_prompt,
            on_subscriptions_listen=self.listen,
        )
        self.server.add_notification_handler(
            "notifications/initialized", types.NotificationParams, self._on_initialized
        )
        holder.listeners.append(self._on_reload)

    # --- what clients see ---------------------------------------------------------------

    def catalog(self, program: Program | None = None) -> Catalog:
        """The tools and prompts of ``program`` (default: the version serving now)."""
        if program is None:
            program, _ = self.holder.snapshot()
        known = self._catalog
        if known is None or known.version != program.version:
            known = Catalog.of(program)
            if program is self.holder.program:
                self._catalog = known
        return known

    def secrets(self) -> frozenset[str]:
        """Every agent's secrets and the server's: never shown to a client."""
        found = set(self.server_secrets)
        program = self.holder.program
        if program is not None:
            for agent in program.agents.values():
                found |= run_secrets(agent)
        return frozenset(found)

    def _agent_secrets(self, ref: MethodRef) -> frozenset[str]:
        program = self.holder.program
        agent = program.agents.get(ref.agent) if program is not None else None
        return run_secrets(agent) if agent is not None else frozenset()

    def initialization_options(self) -> InitializationOptions:
        """What the handshake announces: tools and prompts whose lists change."""
        return self.server.create_initialization_options()

    # --- handlers -----------------------------------------------------------------------

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        self._remember(ctx)
        return types.ListToolsResult(tools=list(self.catalog().tools))

    async def _list_prompts(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        self._remember(ctx)
        return types.ListPromptsResult(prompts=list(self.catalog().prompts))

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        catalog = self.catalog()
        ref = self._find(catalog, params.name, "tool")
        problem = unfit_arguments(params.arguments)
        if problem is not None:
            raise MCPError(
                types.INVALID_PARAMS,
                f"the arguments of tool '{params.name}' are no JSON ({problem}): NaN or "
                "Infinity (or a number too large for a float) and lone surrogates have no value "
                "in it",
            )
        caller = Caller(ctx.session, ctx.request_id) if can_elicit(ctx.session) else None
        progress = None
        if wants_progress(ctx.meta):
            progress = RunProgress(ctx.session, self.server_secrets | self._agent_secrets(ref))
        # Set while the run's task is created, so the run (and what it starts) copies it.
        token = CALLER.set(caller)
        try:
            task = self.service.start(
                ref.agent,
                ref.method,
                params.arguments or {},
                model=self.model,
                on_event=progress.observe if progress is not None else None,
            )
        except RuntimeError as exc:  # shutting down
            raise MCPError(types.INTERNAL_ERROR, str(exc)) from None
        finally:
            CALLER.reset(token)
        try:
            record = await task  # a cancelled call cancels its run: it records "interrupted"
        finally:
            if progress is not None:
                await progress.aclose()
        return self._tool_result(record, structured=params.name in catalog.structured)

    async def _get_prompt(
        self, ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        program, stamp = self.holder.snapshot()
        catalog = self.catalog(program)
        ref = self._find(catalog, params.name, "prompt")
        method = program.agents[ref.agent].methods[ref.method]
        inputs = arguments_to_inputs(method, params.arguments or {})
        rendered = await render_method(
            program, stamp, ref.agent, ref.method, inputs, model=self.model
        )
        secrets = self.server_secrets | rendered.record.secrets
        request = rendered.request
        if request is None:
            error = rendered.record.error or {}
            message = redact(str(error.get("message", "nothing was rendered")), secrets)
            raise MCPError(types.INVALID_PARAMS, f"cannot render prompt '{params.name}': {message}")
        return types.GetPromptResult(
            description=ref.description,
            messages=_prompt_messages(request, lambda text: redact(text, secrets)),
        )

    async def _on_initialized(
        self, ctx: ServerRequestContext[Any], params: types.NotificationParams
    ) -> None:
        self._remember(ctx)

    # --- helpers ------------------------------------------------------------------------

    def _find(self, catalog: Catalog, name: str, kind: str) -> MethodRef:
        ref = catalog.methods.get(name)
        if ref is None:
            names = ", ".join(catalog.methods) or "none"
            raise MCPError(types.INVALID_PARAMS, f"no {kind} '{name}' (there are: {names})")
        return ref

    def _tool_result(self, record: RunRecord, *, structured: bool) -> types.CallToolResult:
        secrets = self.server_secrets | record.secrets
        meta = {RUN_META_KEY: {"id": record.id, "version": record.version.to_dict()}}
        if record.status != "ok":
            error = record.error or {}
            text = redact(str(error.get("message", record.status)), secrets)
            return types.CallToolResult(
                content=[types.TextContent(text=text)], is_error=True, _meta=meta
            )
        output = record.output
        shown = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
        result = types.CallToolResult(
            content=[types.TextContent(text=redact(shown, secrets))], _meta=meta
        )
        if structured and isinstance(output, dict):
            result.structured_content = json.loads(redact(json.dumps(output), secrets))
        return result

    def _remember(self, ctx: ServerRequestContext[Any]) -> None:
        """Keep a handshake-era connection for the change notifications of later reloads."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return  # told through subscriptions/listen
        headers = getattr(ctx.request, "headers", None)
        key = headers.get("mcp-session-id", "") if headers is not None else "stdio"
        if not key or key in self._legacy:
            return
        if len(self._legacy) >= MAX_LEGACY_CONNECTIONS:
            del self._legacy[next(iter(self._legacy))]
        self._legacy[key] = ctx.session

    def _on_reload(self, event: ReloadEvent) -> None:
        if event.status != "loaded":
            return
        before = self._catalog
        after = self.catalog()
        tools = before is None or before.tools_fingerprint() != after.tools_fingerprint()
        prompts = before is None or before.prompts_fingerprint() != after.prompts_fingerprint()
        if tools or prompts:
            task = asyncio.create_task(self.announce(tools=tools, prompts=prompts))
            self._announcing.add(task)
            task.add_done_callback(self._announcing.discard)

    async def announce(self, *, tools: bool, prompts: bool) -> None:
        """Tell every client its lists changed."""
        if tools:
            await self.bus.publish(ToolsListChanged())
        if prompts:
            await self.bus.publish(PromptsListChanged())
        for key, session in list(self._legacy.items()):
            try:
                if tools:
                    await session.send_tool_list_changed()
                if prompts:
                    await session.send_prompt_list_changed()
            except Exception as exc:  # the connection has gone: forget it
                _LOG.debug("dropped MCP connection %s: %r", key, exc)
                self._legacy.pop(key, None)

    async def aclose(self) -> None:
        """End the listen streams gracefully and let announcements finish."""
        self.listen.close()
        if self._announcing:
            await asyncio.wait(set(self._announcing), timeout=1.0)


class _ChangingListsServer(Server[Any]):
    """The SDK's low-level server, whose handshake says its tools and prompts lists change
    (reloads change them, and tell every client). stdio passes the options it gets here to
    ``run``; the streamable HTTP manager asks for them itself, and its handshake said
    ``listChanged: false``, though its clients were told of each change."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(prompts_changed=True, tools_changed=True),
            experimental_capabilities,
            extensions,
        )


def _prompt_messages(
    request: dict[str, Any], shown: Callable[[str], str]
) -> list[types.PromptMessage]:
    """The captured first request as MCP prompt messages. MCP prompts have no system role:
    the instructions come first, as a user message of their own."""
    messages: list[types.PromptMessage] = []
    if request.get("system"):
        messages.append(_message("user", shown(str(request["system"]))))
    for m in request["messages"]:
        content = m["content"]
        if isinstance(content, list):
            text = "\n\n".join(
                str(block.get("text", "")) for block in content if block.get("type") == "text"
            )
        else:
            text = str(content)
        role = "assistant" if m["role"] == "assistant" else "user"
        messages.append(_message(role, shown(text)))
    return messages


def _message(role: str, text: str) -> types.PromptMessage:
    return types.PromptMessage(role=role, content=types.TextContent(text=text))  # type: ignore[arg-type]
