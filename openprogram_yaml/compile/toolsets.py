"""Toolset presets and a method's tool selection, checked against the agent's tools."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING

from ..runtime.toolsets import RESERVED_TOOLSETS
from ..spec.loader import AgentDocument
from ..spec.models import MethodSpec, ToolsetSpec
from ..spec.suggest import did_you_mean
from ..spec.yamlread import Loc
from .context import Collector
from .tools import mcp_server_names

if TYPE_CHECKING:
    from ..runtime import ToolsetPreset

__all__ = ["check_tool_selection", "compile_toolsets", "is_glob"]


def check_tool_selection(
    col: Collector,
    doc: AgentDocument,
    name: str,
    method: MethodSpec,
    toolsets: Mapping[str, ToolsetSpec],
) -> bool:
    """The method's toolset exists; literal names in its allow/deny lists name real tools.

    ``toolsets`` are the ones the agent can use: the project's and its own.
    """
    spec = doc.spec
    servers = mcp_server_names(doc)
    ok = True
    if method.toolset is not None and method.toolset not in (*toolsets, *RESERVED_TOOLSETS):
        known = sorted({*toolsets, "none"})
        col.at(
            doc.source,
            ("methods", name, "toolset"),
            f"unknown toolset '{method.toolset}'{did_you_mean(method.toolset, known)} "
            f"(toolsets: {', '.join(known)})",
        )
        ok = False
    for key in ("tools_allow", "tools_deny"):
        for i, pattern in enumerate(getattr(method, key) or ()):
            builtin = pattern == "ask_user" and spec.ask_user
            if _names_no_tool(pattern, spec.tools, servers) and not builtin:
                col.at(
                    doc.source,
                    ("methods", name, key, i),
                    f"'{pattern}' names no tool of agent '{spec.name}'"
                    f"{did_you_mean(pattern, sorted(spec.tools))}; use a declared tool or a glob",
                )
                ok = False
    return ok


def is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def _names_no_tool(entry: str, tools: Collection[str], servers: Sequence[str]) -> bool:
    """Whether ``entry`` is a tool name the agent cannot have: not a glob, not a declared
    tool, not a tool of one of its MCP ``servers`` (``check --connect`` checks those)."""
    from ..tools.mcp import is_server_tool

    return not is_glob(entry) and entry not in tools and not is_server_tool(entry, servers)


def compile_toolsets(
    col: Collector, doc: AgentDocument, shared: Mapping[str, ToolsetSpec]
) -> dict[str, ToolsetPreset]:
    """The agent's toolset presets (the project's ``shared`` ones, then its own), checked:
    the agent's own name tools it declares, includes exist, includes have no cycle.

    Problems in shared toolsets are the project's to report, once, not each agent's.
    """
    spec = doc.spec
    servers = mcp_server_names(doc)
    every = {**shared, **spec.toolsets}
    presets: dict[str, ToolsetPreset] = {
        name: _preset(ts) for name, ts in shared.items() if name not in spec.toolsets
    }
    for set_name, ts in spec.toolsets.items():
        loc: Loc = ("toolsets", set_name)
        if set_name in RESERVED_TOOLSETS:
            col.at(doc.source, loc, f"toolset name '{set_name}' is reserved", key=True)
        for i, tool in enumerate(ts.tools):
            if _names_no_tool(tool, spec.tools, servers):
                col.at(
                    doc.source,
                    (*loc, "tools", i),
                    f"toolset '{set_name}' names tool '{tool}', which the agent does not "
                    f"declare{did_you_mean(tool, sorted(spec.tools))}",
                )
        for i, inc in enumerate(ts.includes):
            if inc not in every and inc not in RESERVED_TOOLSETS:
                col.at(
                    doc.source,
                    (*loc, "includes", i),
                    f"toolset '{set_name}' includes '{inc}', which is not a toolset"
                    f"{did_you_mean(inc, sorted(every))}",
                )
        presets[set_name] = _preset(ts)
    # An include cycle is harmless at run time, but almost surely a mistake: say so.
    for start in spec.toolsets:
        cycle = _find_cycle(start, {n: list(t.includes) for n, t in every.items()})
        if cycle and cycle[0] == start:
            col.at(
                doc.source,
                ("toolsets", start, "includes"),
                "toolset includes form a cycle: " + " -> ".join(cycle),
            )
    return presets


def _preset(ts: ToolsetSpec) -> ToolsetPreset:
    from ..runtime import ToolsetPreset

    return ToolsetPreset(
        tools=tuple(ts.tools),
        includes=tuple(ts.includes),
        allow=tuple(ts.allow) if ts.allow is not None else None,
        deny=tuple(ts.deny),
        description=ts.description or "",
    )


def _find_cycle(start: str, edges: Mapping[str, list[str]]) -> list[str] | None:
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        path.append(node)
        for nxt in edges.get(node, ()):
            found = visit(nxt)
            if found:
                return found
        path.pop()
        return None

    return visit(start)
