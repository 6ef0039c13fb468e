"""Tools declared in YAML, compiled into runnable tool objects.

Templates (URLs, headers, bodies, argv elements) are compiled here, with positions, against
the tool's declared parameters; the tool kinds themselves live in ``openprogram_yaml.tools``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import Diagnostic, ToolError
from ..spec.loader import AgentDocument
from ..spec.models import AgentToolSpec, HttpToolSpec
from ..spec.yamlread import Loc
from .context import Collector, ProjectContext
from .paths import resolve_inside
from .rendering import CompiledTemplate
from .templates import TemplateEngine
from .url_templates import UrlTemplate

if TYPE_CHECKING:
    from ..tools.base import ConfiguredTool

__all__ = ["build_tools"]

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
    return col.template(engine, text, origin, declared, name, "the tool's parameters")


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
                target, problem = resolve_inside(doc.path, tool.cwd, ctx.root)
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


def build_tools(
    engine: TemplateEngine, col: Collector, doc: AgentDocument, ctx: ProjectContext
) -> tuple[list[Any], dict[str, tuple[str, AgentDocument, Loc]]]:
    """The agent's runnable tools, and its method tools as references to link later."""
    tools: list[Any] = []
    method_refs: dict[str, tuple[str, AgentDocument, Loc]] = {}
    for name, tool in doc.spec.tools.items():
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
    return tools, method_refs
