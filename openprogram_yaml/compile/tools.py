"""Tools declared in YAML, compiled into runnable tool objects.

Templates (URLs, headers, bodies, argv elements) are compiled here, with positions, against
the tool's declared parameters; the tool kinds themselves live in ``openprogram_yaml.tools``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import Diagnostic, ToolError
from ..spec.loader import AgentDocument
from ..spec.models import AgentToolSpec, HttpToolSpec, McpToolSpec
from ..spec.yamlread import Loc
from .context import Collector, ProjectContext
from .rendering import CompiledTemplate
from .templates import TemplateEngine
from .url_templates import UrlTemplate

if TYPE_CHECKING:
    from ..tools.base import ConfiguredTool
    from ..tools.mcp import McpServer

__all__ = ["BuiltTools", "build_tools", "mcp_server_names"]

_EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


def _params(schema: Any) -> set[str]:
    if isinstance(schema, dict) and isinstance(schema.get("properties"), dict):
        return set(schema["properties"])
    return set()


def _compile_text(
    engine: TemplateEngine,
    col: Collector,
    doc: AgentDocument,
    text: str,
    loc: Loc,
    declared: Iterable[str],
    name: str,
) -> CompiledTemplate | None:
    origin = doc.source.origin(loc)
    declared_by = "the tool's parameters"
    return col.template(engine, text, origin, declared, name, declared_by, doc.path)


def _compile_value(
    engine: TemplateEngine,
    col: Collector,
    doc: AgentDocument,
    value: Any,
    loc: Loc,
    declared: set[str],
    name: str,
) -> Any:
    """A JSON value whose string leaves become templates."""
    if isinstance(value, str):
        return _compile_text(engine, col, doc, value, loc, declared, name)
    if isinstance(value, dict):
        return {
            k: _compile_value(engine, col, doc, v, (*loc, k), declared, name)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [
            _compile_value(engine, col, doc, v, (*loc, i), declared, name)
            for i, v in enumerate(value)
        ]
    return value


def _check_url(col: Collector, doc: AgentDocument, http: HttpToolSpec, loc: Loc) -> bool:
    """Report, at their positions, a URL whose origin values could change and bad ``hosts``."""
    from ..safe_urls import check_template, parse_hosts

    ok = True
    patterns, problems = parse_hosts(http.hosts or [])
    for index, message in problems:
        _error(col, doc, (*loc, "hosts", index), message)
        ok = False
    _, problem = check_template(http.url, hosts=patterns)
    if problem is not None:
        offset, message = problem
        line = http.url.count("\n", 0, offset) + 1
        column = offset - (http.url.rfind("\n", 0, offset) + 1) + 1
        at = doc.source.origin((*loc, "url")).locate(line, column)
        col.diagnostics.append(Diagnostic(at.path, at.line, at.col, message))
        return False
    return ok


def _error(col: Collector, doc: AgentDocument, loc: Loc, message: str) -> None:
    col.at(doc.source, loc, message)


def _build_one(
    engine: TemplateEngine,
    col: Collector,
    doc: AgentDocument,
    name: str,
    tool: AgentToolSpec,
    ctx: ProjectContext,
) -> Any:
    from ..tools.command import CommandTool
    from ..tools.http import HttpTool
    from ..tools.python import PythonTool

    loc: Loc = ("tools", name)
    before = len(col.diagnostics)
    parameters: dict[str, Any] | None = None
    if tool.parameters is not None:
        parameters, _ = col.schema(
            tool.parameters,
            ctx=ctx,
            base_file=doc.path,
            source=doc.source,
            loc=(*loc, "parameters"),
        )
    declared = _params(parameters)
    description = tool.description or ""
    try:
        if tool.python is not None:
            built = PythonTool(
                name=name,
                description=description,
                parameters=parameters,
                ref=tool.python,
                project_root=ctx.root,
                packages=ctx.python_packages,
            )
            source = getattr(built, "source_file", None)
            if source is not None:
                col.files.add(Path(source))
            return built if len(col.diagnostics) == before else None
        if tool.http is not None:
            http = tool.http
            url_ok = _check_url(col, doc, http, (*loc, "http"))
            url = _compile_text(engine, col, doc, http.url, (*loc, "http", "url"), declared, name)
            headers = {
                k: _compile_text(engine, col, doc, v, (*loc, "http", "headers", k), declared, name)
                for k, v in http.headers.items()
            }
            query = {
                k: _compile_text(engine, col, doc, v, (*loc, "http", "query", k), declared, name)
                for k, v in http.query.items()
            }
            body = _compile_value(
                engine, col, doc, http.body, (*loc, "http", "body"), declared, name
            )
            if len(col.diagnostics) != before or url is None or not url_ok:
                return None
            return HttpTool(
                name=name,
                description=description,
                parameters=parameters or _EMPTY_PARAMETERS,
                method=http.method,
                url=UrlTemplate(url),
                hosts=http.hosts or (),
                headers=_all_compiled(headers),
                query=_all_compiled(query),
                body=body,
                timeout_s=tool.timeout_s,
                max_bytes=tool.max_output_bytes,
            )
        if tool.command is not None:
            argv = [
                _compile_text(engine, col, doc, part, (*loc, "command", i), declared, name)
                for i, part in enumerate(tool.command)
            ]
            cwd = ctx.root
            if tool.cwd is not None:
                target, problem = col.resolutions.resolve_inside(
                    doc.path, tool.cwd, ctx.root, col.lookups
                )
                if target is None:
                    _error(col, doc, (*loc, "cwd"), str(problem))
                elif not target.is_dir():
                    _error(col, doc, (*loc, "cwd"), f"'{tool.cwd}' is not a folder ({target})")
                else:
                    cwd = target
            if len(col.diagnostics) != before:
                return None
            return CommandTool(
                name=name,
                description=description,
                parameters=parameters or _EMPTY_PARAMETERS,
                argv=[t for t in argv if t is not None],
                cwd=cwd,
                timeout_s=tool.timeout_s,
                max_output=tool.max_output_bytes,
                project_root=ctx.root,
                ok_exit_codes=tool.ok_exit_codes or (0,),
            )
    except (ToolError, ValueError, TypeError) as exc:
        kind = next(k for k in ("python", "http", "command") if getattr(tool, k) is not None)
        # ToolBuildError names the key at fault ("parameters", "cwd", …); point there.
        field = getattr(exc, "field", None) or kind
        target_loc = (*loc, field) if field in type(tool).model_fields else (*loc, kind)
        _error(col, doc, target_loc, str(exc))
    return None


def _build_server(
    col: Collector, doc: AgentDocument, name: str, mcp: McpToolSpec, ctx: ProjectContext
) -> McpServer | None:
    """The ``mcp`` entry ``name`` as a server, not started (its tools are listed when a run
    first offers them); problems are reported at their keys."""
    from ..tools.base import ToolBuildError
    from ..tools.mcp import McpServer

    loc: Loc = ("tools", name, "mcp")
    cwd = ctx.root if mcp.command is not None else None
    if mcp.cwd is not None:
        target, problem = col.resolutions.resolve_inside(doc.path, mcp.cwd, ctx.root, col.lookups)
        if target is None:
            _error(col, doc, (*loc, "cwd"), str(problem))
            return None
        if not target.is_dir():
            _error(col, doc, (*loc, "cwd"), f"'{mcp.cwd}' is not a folder ({target})")
            return None
        cwd = target
    try:
        server = McpServer(
            name,
            command=mcp.command,
            cwd=cwd,
            env=mcp.env,
            url=mcp.url,
            headers=mcp.headers,
            timeout_s=mcp.timeout_s,
            confirm=mcp.confirm,
        )
        pos = doc.source.at(loc)
        server.position = (pos.path, pos.line, pos.col)
        return server
    except ToolBuildError as exc:
        field = exc.field if exc.field in McpToolSpec.model_fields else None
        _error(col, doc, (*loc, field) if field else loc, str(exc))
    return None


def mcp_server_names(doc: AgentDocument) -> list[str]:
    """The agent's tools that are MCP servers (``files`` of ``files__read_file``)."""
    return [name for name, tool in doc.spec.tools.items() if tool.mcp is not None]


def _expected_server_tools(doc: AgentDocument, servers: dict[str, McpServer]) -> None:
    """Tell each server the tool names (not globs) the agent's toolsets and allow/deny lists
    give for it, with their positions, for ``check --connect``."""
    from ..tools.mcp import SEPARATOR

    places: list[tuple[str, Loc]] = []
    for set_name, toolset in doc.spec.toolsets.items():
        for key in ("tools", "allow", "deny"):
            for i, entry in enumerate(getattr(toolset, key) or ()):
                places.append((entry, ("toolsets", set_name, key, i)))
    for method_name, method in doc.spec.methods.items():
        for key in ("tools_allow", "tools_deny"):
            for i, entry in enumerate(getattr(method, key) or ()):
                places.append((entry, ("methods", method_name, key, i)))
    for entry, loc in places:
        server = servers.get(entry.partition(SEPARATOR)[0])
        if server is not None and SEPARATOR in entry and not any(c in entry for c in "*?["):
            pos = doc.source.at(loc)
            server.expected.append((entry, (pos.path, pos.line, pos.col)))


def _add_confirm(
    engine: TemplateEngine,
    col: Collector,
    doc: AgentDocument,
    name: str,
    tool: AgentToolSpec,
    built: ConfiguredTool,
) -> None:
    """Set the tool's ``confirm``: a question template is checked against its parameters."""
    from ..tools.base import ConfirmQuestion

    if isinstance(tool.confirm, bool):
        built.confirm = tool.confirm
        return
    declared = _params(built.spec.parameters)
    template = _compile_text(
        engine, col, doc, tool.confirm, ("tools", name, "confirm"), declared, name
    )
    if template is not None:
        built.confirm = ConfirmQuestion(template)


def _all_compiled(templates: dict[str, CompiledTemplate | None]) -> dict[str, CompiledTemplate]:
    """The templates of a mapping, once every one compiled (checked by the caller)."""
    return {k: v for k, v in templates.items() if v is not None}


@dataclass(frozen=True, slots=True)
class BuiltTools:
    """An agent's tools as compiled."""

    #: Tools that run on their own (python, http, command).
    tools: list[Any]
    #: Method tools, as references to link once every agent compiled.
    method_refs: dict[str, tuple[str, AgentDocument, Loc]]
    #: MCP servers, whose tools are known once a run connects to them.
    servers: list[McpServer]


def build_tools(
    engine: TemplateEngine, col: Collector, doc: AgentDocument, ctx: ProjectContext
) -> BuiltTools:
    """The agent's runnable tools, its method tools and its MCP servers."""
    tools: list[Any] = []
    method_refs: dict[str, tuple[str, AgentDocument, Loc]] = {}
    servers: dict[str, McpServer] = {}
    for name, tool in doc.spec.tools.items():
        if tool.mcp is not None:
            server = _build_server(col, doc, name, tool.mcp, ctx)
            if server is not None:
                servers[name] = server
            continue
        if tool.method is not None:
            if tool.parameters is not None:
                _error(
                    col,
                    doc,
                    ("tools", name, "parameters"),
                    "a method tool takes its parameters from the method's inputs; remove them",
                )
            method_refs[name] = (tool.method, doc, ("tools", name, "method"))
            continue
        built = _build_one(engine, col, doc, name, tool, ctx)
        if built is not None:
            _add_confirm(engine, col, doc, name, tool, built)
            tools.append(built)
    if servers:  # most agents have none, and the MCP client is not imported for them
        _expected_server_tools(doc, servers)
        _no_server_tool_names(col, doc, servers)
    return BuiltTools(tools, method_refs, list(servers.values()))


def _no_server_tool_names(
    col: Collector, doc: AgentDocument, servers: dict[str, McpServer]
) -> None:
    """Refuse a tool of the agent named as one of its MCP servers' tools would be
    (``files__read_file`` beside a server ``files``): the server's tool of that name would
    take its place when the run starts, its calls (a ``confirm`` one's too) going to the
    server."""
    from ..tools.mcp import SEPARATOR, is_server_tool

    for name in doc.spec.tools:
        # An MCP entry too: ``files__x``'s tool ``y`` and ``files``'s tool ``x__y`` meet.
        if is_server_tool(name, [server for server in servers if server != name]):
            server = name.partition(SEPARATOR)[0]
            _error(
                col,
                doc,
                ("tools", name),
                f"'{name}' is the name a tool of the MCP server '{server}' gets; rename this "
                f"tool (names with '{SEPARATOR}' after a server's name are the server's)",
            )
