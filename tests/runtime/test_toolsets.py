"""Toolsets: the default set, presets with includes, allow/deny layering, call-time checks."""

from __future__ import annotations

from typing import Any

import pytest

from openprogram_yaml.providers.test import Reply
from openprogram_yaml.runtime import ToolPolicy, ToolsetPreset
from openprogram_yaml.runtime.toolsets import as_tool, resolve_preset
from openprogram_yaml.runtimes.protocol import ToolSpec

NAMES = ["read_file", "search_docs", "lookup_order", "order_delete", "file_delete", "count_words"]


def tools(calls: list[str] | None = None) -> list[dict[str, Any]]:
    def make_tool(name: str) -> dict[str, Any]:
        def run() -> str:
            if calls is not None:
                calls.append(name)
            return f"{name} ok"

        return {"spec": {"name": name}, "execute": run}

    return [make_tool(n) for n in NAMES]


PRESETS = {
    "read_only": ToolsetPreset(tools=("read_file", "search_docs", "lookup_order")),
    "all_but_writes": ToolsetPreset(
        includes=("read_only",), tools=("count_words",), deny=("*_delete",)
    ),
    "everything": ToolsetPreset(tools=("*",)),
    "loop_a": ToolsetPreset(tools=("read_file",), includes=("loop_b",)),
    "loop_b": ToolsetPreset(tools=("search_docs",), includes=("loop_a",)),
    "only_reads": ToolsetPreset(includes=("everything",), allow=("read_*", "search_*")),
}


def offered(model: Any, index: int = -1) -> set[str]:
    return set(model.requests[index].tool_names)


def test_default_is_the_full_registered_set(make: Any) -> None:
    rt, model = make(["a", "b", "c", "d"], tools=tools(), toolsets=PRESETS)
    rt.exec("x")
    assert offered(model) == set(NAMES)
    rt.exec("x", toolset="full")
    assert offered(model) == set(NAMES)
    rt.exec("x", toolset="none")
    assert "tools" not in model.requests[-1].kwargs
    rt.exec("x", tools=[])
    assert "tools" not in model.requests[-1].kwargs


def test_tools_can_be_named_from_the_registry(make: Any) -> None:
    rt, model = make(["a"], tools=tools())
    rt.exec("x", tools=["count_words", "read_file"])
    assert offered(model) == {"count_words", "read_file"}
    with pytest.raises(ValueError, match="unknown tool"):
        rt.exec("x", tools=["nope"])


def test_presets_with_includes_and_deny(make: Any) -> None:
    rt, model = make(["a", "b"], tools=tools(), toolsets=PRESETS)
    rt.exec("x", toolset="read_only")
    assert offered(model) == {"read_file", "search_docs", "lookup_order"}
    rt.exec("x", toolset="all_but_writes")
    assert offered(model) == {"read_file", "search_docs", "lookup_order", "count_words"}


def test_include_cycles_are_harmless(make: Any) -> None:
    rt, model = make(["a"], tools=tools(), toolsets=PRESETS)
    rt.exec("x", toolset="loop_a")
    assert offered(model) == {"read_file", "search_docs"}


def test_preset_allow_narrows_its_includes() -> None:
    members, _ = resolve_preset("only_reads", PRESETS, NAMES)
    assert members == {"read_file", "search_docs"}


def test_unknown_toolset_is_an_error(make: Any) -> None:
    rt, _ = make(["a"], tools=tools(), toolsets=PRESETS)
    with pytest.raises(ValueError, match="unknown toolset 'nope'"):
        rt.exec("x", toolset="nope")


def test_allow_and_deny_globs(make: Any) -> None:
    rt, model = make(["a", "b"], tools=tools())
    rt.exec("x", tools_allow=["*_order", "read_*"])
    assert offered(model) == {"lookup_order", "read_file"}
    rt.exec("x", tools_deny=["*_delete", "count_*"])
    assert offered(model) == {"read_file", "search_docs", "lookup_order"}


def test_globs_are_case_sensitive(make: Any) -> None:
    rt, model = make(["a"], tools=tools())
    rt.exec("x", tools_allow=["READ_*"])
    assert "tools" not in model.requests[-1].kwargs


def test_exec_allow_cannot_widen_a_preset_deny(make: Any) -> None:
    rt, model = make(["a"], tools=tools(), toolsets=PRESETS)
    rt.exec("x", toolset="all_but_writes", tools_allow=["*_delete", "read_file"])
    assert offered(model) == {"read_file"}


def test_policy_layers() -> None:
    outer = ToolPolicy().narrow(allow=["read_*", "order_*"], deny=["*_delete"])
    inner = outer.narrow(allow=["order_delete", "read_file"])
    assert inner.permits("read_file")
    assert not inner.permits("order_delete")  # the outer deny survives the inner allow
    assert not inner.permits("read_other")  # allow lists intersect
    assert "denied" in (inner.refusal("order_delete") or "")


def test_outer_deny_survives_an_inner_allow_in_a_nested_exec(make: Any) -> None:
    """A tool that runs its own exec cannot widen the policy it was called under."""
    calls: list[str] = []
    inner_rt, inner_model = make([Reply.call("order_delete"), "inner done"], tools=tools(calls))

    def delegate() -> str:
        return str(inner_rt.exec("go", tools_allow=["order_delete", "read_file"]))

    outer_tools = [*tools(calls), {"spec": {"name": "delegate"}, "execute": delegate}]
    outer_rt, _ = make([Reply.call("delegate"), "outer done"], tools=outer_tools)
    assert outer_rt.exec("x", tools_deny=["*_delete"]) == "outer done"
    assert set(inner_model.requests[0].tool_names) == {"read_file"}
    refused = inner_model.requests[1].messages[-1]
    assert refused.is_error and "denied by policy" in refused.text()
    assert "order_delete" not in calls


def test_a_denied_tool_requested_by_the_model_is_refused_at_call_time(make: Any) -> None:
    calls: list[str] = []
    rt, model = make([Reply.call("file_delete"), "ok"], tools=tools(calls))
    assert rt.exec("x", tools_deny=["*_delete"]) == "ok"
    assert calls == []
    refused = model.requests[1].messages[-1]
    assert refused.is_error and "file_delete" in refused.text()


def test_a_registered_tool_outside_the_toolset_is_refused(make: Any) -> None:
    calls: list[str] = []
    rt, model = make([Reply.call("count_words"), "ok"], tools=tools(calls), toolsets=PRESETS)
    rt.exec("x", toolset="read_only")
    assert calls == []
    assert model.requests[1].messages[-1].is_error


def test_reserved_toolset_names() -> None:
    from openprogram_yaml.runtime import Runtime

    rt = Runtime(call=lambda c, m, r: "x")
    with pytest.raises(ValueError):
        rt.register_toolset("none", ToolsetPreset())


def test_tools_source_filter(make: Any) -> None:
    mcp = {"spec": {"name": "remote"}, "execute": lambda: "r", "source": "mcp:files"}
    rt, model = make(["a"], tools=[*tools(), mcp])
    rt.exec("x", tools_source=["mcp:*"])
    assert offered(model) == {"remote"}


class _Counter:
    """A tool object, as a compiled agent's tools are."""

    def __init__(self) -> None:
        self.spec = ToolSpec(name="count", description="", parameters={"type": "object"})
        self.confirm: object = None

    async def execute(self) -> str:
        return "ok"


def test_a_tool_object_is_made_into_a_tool_once_until_it_changes() -> None:
    obj = _Counter()
    first = as_tool(obj)
    assert as_tool(obj) is first  # every run's Runtime gets the same Tool
    assert first.is_async and first.confirm is None
    obj.confirm = "Count them?"  # the compiler sets confirm: a changed object is made again
    asked = as_tool(obj)
    assert asked is not first and asked.confirm is not None
    assert asked.confirm({}) == "Count them?"
    obj.spec = ToolSpec(name="count2", description="", parameters={"type": "object"})
    assert as_tool(obj).name == "count2"


def test_a_dict_tool_is_made_again_each_time() -> None:
    spec = {"name": "d", "parameters": {"type": "object"}}
    item = {"spec": spec, "execute": lambda: "ok"}
    first = as_tool(item)
    spec["description"] = "changed in place"
    assert as_tool(item).spec.description == "changed in place" and first.spec.description == ""
