"""Tools, toolset presets and the allow/deny policy.

Layering rule (DESIGN.md): denies from every layer add up; each allow list narrows further;
an inner layer can never widen an outer one. Layers are, outermost first: the policy of the
exec (and tool) that is running when a nested exec starts, the toolset preset (with its
includes), and the exec's own ``tools_allow`` / ``tools_deny``. The policy is checked again
when the model calls a tool, not only when the tool list is built.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from openprogram_yaml.runtimes.protocol import ToolSpec

__all__ = [
    "RESERVED_TOOLSETS",
    "Tool",
    "ToolPolicy",
    "ToolsetPreset",
    "as_tool",
    "current_policy",
    "default_confirmation",
    "offer_tools",
    "resolve_preset",
]

RESERVED_TOOLSETS = frozenset({"full", "none"})


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool the runtime can offer: its spec, and ``execute(**arguments)`` (sync or async)."""

    spec: ToolSpec
    execute: Callable[..., object]
    source: str = "local"
    is_async: bool = field(default=False, compare=False)
    #: For a tool the person must approve before each call: the question, from the arguments.
    confirm: Callable[[Mapping[str, object]], str] | None = field(default=None, compare=False)

    @property
    def name(self) -> str:
        return self.spec.name


def _spec_from(value: object, where: str) -> ToolSpec:
    if isinstance(value, ToolSpec):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(
            f"{where}: a tool spec must be a mapping or ToolSpec, not {type(value).__name__}"
        )
    name = value.get("name")
    if not isinstance(name, str) or not name:
        raise TypeError(f"{where}: a tool spec needs a non-empty 'name'")
    params = value.get("parameters") or {"type": "object", "properties": {}}
    if not isinstance(params, Mapping):
        raise TypeError(f"{where}: tool {name!r} 'parameters' must be a JSON Schema object")
    return ToolSpec(
        name=name,
        description=str(value.get("description", "")),
        parameters=dict(params),
        strict=bool(value.get("strict", False)),
    )


def _is_async(fn: Callable[..., object]) -> bool:
    """True for async functions and for objects whose ``__call__`` is async."""
    if inspect.iscoroutinefunction(fn):
        return True
    return not inspect.isroutine(fn) and inspect.iscoroutinefunction(type(fn).__call__)


#: Tools made from objects, by the object's identity (the object is kept, so its id is not
#: reused): a compiled agent's tools go to every run's ``Runtime``, and making each again
#: (the spec, whether ``execute`` is async, the question) cost every run a few microseconds.
_made: dict[int, tuple[object, tuple[object, object, object, object], Tool]] = {}
_MAX_MADE = 1024


def as_tool(obj: object) -> Tool:
    """A ``Tool`` from a ``Tool``, a ``{"spec", "execute"}`` dict or an object with those."""
    if isinstance(obj, Tool):
        return obj
    if isinstance(obj, Mapping):
        spec, execute, source = obj.get("spec"), obj.get("execute"), obj.get("source", "local")
        confirm = obj.get("confirm")
    else:
        spec = getattr(obj, "spec", None)
        execute = getattr(obj, "execute", None)
        source = getattr(obj, "source", "local")
        confirm = getattr(obj, "confirm", None)
        made = _made.get(id(obj))
        # The same object with the same parts (``execute`` compares equal, as a bound
        # method of the same object does): the Tool made last time.
        if made is not None and made[0] is obj and made[1] == (spec, execute, source, confirm):
            return made[2]
    if spec is None or not callable(execute):
        raise TypeError(
            f"a tool must be a {{'spec', 'execute'}} dict or an object with .spec and .execute, "
            f"not {obj!r}"
        )
    tool_spec = _spec_from(spec, "tool")
    tool = Tool(
        tool_spec, execute, str(source), _is_async(execute), _confirmation(confirm, tool_spec.name)
    )
    if not isinstance(obj, Mapping) and isinstance(spec, ToolSpec):  # a dict may change
        if len(_made) >= _MAX_MADE:
            _made.clear()
        _made[id(obj)] = (obj, (spec, execute, source, confirm), tool)
    return tool


def _confirmation(value: object, name: str) -> Callable[[Mapping[str, object]], str] | None:
    """A tool's ``confirm``: True (a default question), a fixed question, or a function of the
    arguments making it; None or False: the tool runs without asking."""
    if value is None or value is False:
        return None
    if value is True:
        return lambda arguments: default_confirmation(name, arguments)
    if isinstance(value, str):
        return lambda arguments: value
    if callable(value):
        return lambda arguments: str(value(arguments))
    raise TypeError(f"tool {name!r}: confirm must be a bool, a question or a function")


def default_confirmation(name: str, arguments: Mapping[str, object]) -> str:
    """The question asked before a confirmed tool runs when it declares none of its own."""
    shown = json.dumps(dict(arguments), ensure_ascii=False, sort_keys=True, default=str)
    return f"Run tool {name!r} with {shown}?"


@dataclass(frozen=True, slots=True)
class ToolsetPreset:
    """A named set of tools: names or glob patterns, other presets included, allow and deny."""

    tools: tuple[str, ...] = ()
    includes: tuple[str, ...] = ()
    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] = ()
    description: str = ""


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    """Allow lists (each must match) and deny patterns (none may match)."""

    allows: tuple[tuple[str, ...], ...] = ()
    denies: tuple[str, ...] = ()

    def narrow(
        self, allow: Iterable[str] | None = None, deny: Iterable[str] | None = None
    ) -> ToolPolicy:
        """This policy with one more layer; the result never permits more than ``self``."""
        allows = self.allows if allow is None else (*self.allows, tuple(allow))
        denies = self.denies if not deny else (*self.denies, *deny)
        return ToolPolicy(allows, denies)

    def refusal(self, name: str) -> str | None:
        """Why ``name`` is refused, or None when it is permitted."""
        for pattern in self.denies:
            if fnmatchcase(name, pattern):
                return f"tool {name!r} is denied by policy (matches {pattern!r})"
        for layer in self.allows:
            if not any(fnmatchcase(name, pattern) for pattern in layer):
                return f"tool {name!r} is not in an allow list ({', '.join(layer) or 'empty'})"
        return None

    def permits(self, name: str) -> bool:
        return self.refusal(name) is None


# ToolPolicy is frozen, so sharing one default instance is safe.
_policy: ContextVar[ToolPolicy] = ContextVar("openprogram_tool_policy", default=ToolPolicy())  # noqa: B039


def current_policy() -> ContextVar[ToolPolicy]:
    """The context variable holding the policy nested execs inherit."""
    return _policy


def _matching(patterns: Sequence[str], names: Iterable[str]) -> set[str]:
    return {n for n in names if any(fnmatchcase(n, p) for p in patterns)}


def resolve_preset(
    name: str, presets: Mapping[str, ToolsetPreset], registered: Iterable[str]
) -> tuple[frozenset[str], ToolPolicy]:
    """The members of preset ``name`` among ``registered`` and the policy layers it adds.

    Includes are followed once each, so a cycle is harmless. Denies of every included
    preset apply to the whole result; a preset's allow list narrows what it and its
    includes contribute.
    """
    names = list(registered)
    denies: list[str] = []
    allows: list[tuple[str, ...]] = []
    visiting: set[str] = set()

    def members(preset_name: str) -> set[str]:
        if preset_name in visiting:
            return set()
        visiting.add(preset_name)
        preset = presets.get(preset_name)
        if preset is None:
            known = ", ".join(sorted({*presets, *RESERVED_TOOLSETS}))
            raise ValueError(f"unknown toolset {preset_name!r}; known: {known}")
        found = _matching(preset.tools, names)
        for included in preset.includes:
            if included == "full":
                found.update(names)
            elif included != "none":
                found |= members(included)
        if preset.allow is not None:
            found = _matching(preset.allow, found)
            allows.append(tuple(preset.allow))
        denies.extend(preset.deny)
        return found

    result = members(name)
    policy = ToolPolicy(tuple(allows), tuple(denies))
    return frozenset(n for n in result if policy.permits(n)), policy


def _lookup(registered: Mapping[str, Tool], item: object) -> Tool:
    if isinstance(item, str):
        tool = registered.get(item)
        if tool is None:
            names = ", ".join(registered) or "none"
            raise ValueError(f"unknown tool {item!r}; registered: {names}")
        return tool
    return as_tool(item)


def offer_tools(
    registered: Mapping[str, Tool],
    presets: Mapping[str, ToolsetPreset],
    tools: Sequence[object] | None,
    toolset: str | None,
    tools_source: Sequence[str] | None,
    tools_allow: Sequence[str] | None,
    tools_deny: Sequence[str] | None,
) -> tuple[dict[str, Tool], ToolPolicy, bool]:
    """The tools offered for one exec, the policy enforced at call time, and whether the
    caller asked for tools explicitly.

    ``tools=None`` means every registered tool; ``tools=[]`` or ``toolset="none"`` none.
    Entries of ``tools`` may name registered tools. The policy starts from the one the
    enclosing exec runs under (``current_policy()``), so nesting can only narrow it.
    """
    policy = _policy.get()
    named_preset = toolset not in (None, "full", "none")
    explicit = bool(tools) or named_preset
    if toolset == "none" or (tools is not None and not tools):
        candidates: list[Tool] = []
    elif tools is not None:
        candidates = [_lookup(registered, t) for t in tools]
    else:
        candidates = list(registered.values())
    if named_preset:
        assert toolset is not None
        members, preset_policy = resolve_preset(toolset, presets, registered)
        policy = ToolPolicy(
            (*policy.allows, *preset_policy.allows), (*policy.denies, *preset_policy.denies)
        )
        candidates = [t for t in candidates if t.name in members]
    if tools_allow is not None or tools_deny:
        policy = policy.narrow(tools_allow, tools_deny)
    if tools_source:
        candidates = [t for t in candidates if any(fnmatchcase(t.source, p) for p in tools_source)]
    offered: dict[str, Tool] = {}
    for tool in candidates:
        if tool.name in offered and offered[tool.name] is not tool:
            raise ValueError(f"two different tools are named {tool.name!r}")
        if policy.permits(tool.name):
            offered[tool.name] = tool
    return offered, policy, explicit
