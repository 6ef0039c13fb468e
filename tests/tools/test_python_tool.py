"""``python: module:function`` tools against real modules written into a project folder."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from openprogram_yaml.errors import ToolError
from openprogram_yaml.providers.test import Reply
from openprogram_yaml.tools.base import ToolBuildError
from openprogram_yaml.tools.python import PythonTool, load_python_tool

TOOLS_SOURCE = '''
import asyncio
from os import system
from typing import Literal, Optional


def count_words(text: str, min_length: int = 1) -> int:
    """Count the words in a text.

    Longer explanation that is not the description.
    """
    return len([w for w in text.split() if len(w) >= min_length])


async def lookup(order_id: str) -> dict:
    await asyncio.sleep(0)
    return {"id": order_id, "status": "shipped"}


def explode(reason: str) -> str:
    raise ValueError(f"cannot do it: {reason}")


def leave() -> None:
    raise SystemExit(3)


def shapes(
    name: str,
    ratio: float,
    flag: bool,
    tags: list[str],
    scores: dict[str, float],
    nickname: Optional[str] = None,
    mode: Literal["fast", "slow"] = "fast",
) -> str:
    return name


class Thing:
    pass


def takes_thing(thing: Thing) -> str:
    return "x"
'''

Project = tuple[Path, str]


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    """A project root holding one uniquely named tools module (sys.modules is per process)."""
    name = f"mytools_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(TOOLS_SOURCE, encoding="utf-8")
    yield tmp_path, name
    sys.modules.pop(name, None)


def build(project: Project, attr: str, **kwargs: Any) -> PythonTool:
    root, module = project
    kwargs.setdefault("description", None)
    kwargs.setdefault("parameters", None)
    return PythonTool(name=attr, ref=f"{module}:{attr}", project_root=root, **kwargs)


def run(tool: PythonTool, **arguments: Any) -> Any:
    return asyncio.run(tool.execute(**arguments))


def test_sync_function_runs_with_schema_and_description_from_its_signature(
    project: Project,
) -> None:
    tool = build(project, "count_words")
    assert tool.spec.description == "Count the words in a text."
    assert tool.spec.parameters == {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "min_length": {"type": "integer", "default": 1},
        },
        "required": ["text"],
        "additionalProperties": False,
    }
    assert run(tool, text="one two three") == "3"
    assert run(tool, text="a bb ccc", min_length=2) == "2"


def test_async_function_result_is_json_for_the_model(project: Project) -> None:
    tool = build(project, "lookup")
    assert json.loads(run(tool, order_id="A1")) == {"id": "A1", "status": "shipped"}


def test_type_hints_become_json_schema(project: Project) -> None:
    props = build(project, "shapes").spec.parameters["properties"]
    assert props["ratio"] == {"type": "number"}
    assert props["flag"] == {"type": "boolean"}
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert props["scores"] == {"type": "object", "additionalProperties": {"type": "number"}}
    assert props["nickname"] == {"type": ["string", "null"], "default": None}
    assert props["mode"] == {"enum": ["fast", "slow"], "type": "string", "default": "fast"}


def test_a_type_without_json_meaning_asks_for_declared_parameters(project: Project) -> None:
    with pytest.raises(ToolBuildError, match="no JSON Schema equivalent") as info:
        build(project, "takes_thing")
    assert info.value.field == "parameters"
    declared = {"type": "object", "properties": {"thing": {"type": "object"}}}
    assert build(project, "takes_thing", parameters=declared).spec.parameters == declared


def test_declared_parameters_the_function_does_not_take_are_a_build_error(
    project: Project,
) -> None:
    declared = {"type": "object", "properties": {"txt": {"type": "string"}}}
    with pytest.raises(ToolBuildError, match=r"'txt'.*does not accept"):
        build(project, "count_words", parameters=declared)


def test_arguments_failing_the_schema_are_refused_before_the_call(project: Project) -> None:
    tool = build(project, "count_words")
    with pytest.raises(ToolError, match=r"(?s)invalid arguments.*\$\.min_length"):
        run(tool, text="x", min_length="two")
    with pytest.raises(ToolError, match="text"):
        run(tool)


def test_a_raising_function_is_a_tool_error_naming_the_exception(project: Project) -> None:
    with pytest.raises(ToolError, match="ValueError: cannot do it: no"):
        run(build(project, "explode"), reason="no")
    # A tool must never end the program it runs in.
    with pytest.raises(ToolError, match="SystemExit"):
        run(build(project, "leave"))


@pytest.mark.parametrize(
    "ref",
    [
        "os:system",
        "json:dumps",
        "builtins:eval",
        "subprocess:run",
        "yaml:safe_load",
        "jinja2:Template",
        "httpx:get",
        "openprogram_yaml.errors:ToolError",
    ],
)
def test_modules_outside_the_project_are_refused(tmp_path: Path, ref: str) -> None:
    top = ref.split(".")[0].split(":")[0]
    with pytest.raises(ToolBuildError, match=f"add `python_packages: \\[{top}\\]`") as info:
        load_python_tool(ref, project_root=tmp_path)
    assert info.value.field == "python"


def test_a_library_function_re_exported_by_a_project_module_is_refused(
    project: Project,
) -> None:
    with pytest.raises(ToolBuildError, match="refused"):
        build(project, "system")  # the module did `from os import system`


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("no_colon", "must look like"),
        ("not_a_module_anywhere_xyz:f", "no module named 'not_a_module_anywhere_xyz'"),
        ("{module}:missing", "has no attribute 'missing'"),
        ("{module}:Thing", "is a class, not a function"),
    ],
)
def test_bad_references_are_build_errors(project: Project, ref: str, message: str) -> None:
    root, module = project
    with pytest.raises(ToolBuildError, match=message):
        load_python_tool(ref.format(module=module), project_root=root)


def test_import_leaves_sys_path_as_it_was_and_reports_the_module_file(
    project: Project,
) -> None:
    before = list(sys.path)
    tool = build(project, "count_words")
    assert sys.path == before
    root, module = project
    assert tool.source_file == (root / f"{module}.py").resolve()
    assert tool.files == {tool.source_file}


def test_an_edited_module_is_reloaded_on_the_next_build(project: Project) -> None:
    root, module = project
    assert run(build(project, "count_words"), text="a b") == "2"
    path = root / f"{module}.py"
    path.write_text(
        textwrap.dedent(
            """
            def count_words(text: str) -> str:
                return "edited"
            """
        ),
        encoding="utf-8",
    )
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert run(build(project, "count_words"), text="a b") == "edited"


def test_the_model_sees_the_result_through_runtime_exec(
    project: Project, run_with_model: Callable[..., Any]
) -> None:
    tool = build(project, "count_words")
    model = run_with_model(tool, [Reply.call("count_words", {"text": "a b c"}), "done"])
    first = model.requests[1].messages[-1]
    assert (first.role, first.text(), first.is_error) == ("tool", "3", False)
    assert model.requests[0].tools[0].parameters == tool.spec.parameters


def test_two_projects_with_a_package_of_the_same_name_each_get_their_own(
    tmp_path: Path,
) -> None:
    package = f"shared_{uuid.uuid4().hex[:8]}"
    roots = []
    for label in ("first", "second"):
        root = tmp_path / label
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
        (root / package / "fns.py").write_text(f"def which() -> str:\n    return {label!r}\n")
        roots.append(root)
    try:
        for _ in range(2):  # back and forth: each build finds its own project's module
            for root in roots:
                tool = PythonTool("which", None, None, f"{package}.fns:which", root)
                assert run(tool) == root.name
                assert tool.source_file == (root / package / "fns.py").resolve()
    finally:
        for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
            del sys.modules[name]


def test_a_pickled_tool_reads_its_function_again(project: Project) -> None:
    import pickle

    root, module = project
    kept = pickle.dumps(build(project, "count_words"))
    path = root / f"{module}.py"
    path.write_text(
        textwrap.dedent(
            '''
            def count_words(text: str, limit: int = 3) -> str:
                """Count words, up to a limit."""
                return str(min(len(text.split()), limit))
            '''
        ),
        encoding="utf-8",
    )
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    tool = pickle.loads(kept)
    assert set(tool.spec.parameters["properties"]) == {"text", "limit"}
    assert tool.spec.description == "Count words, up to a limit."
    assert run(tool, text="a b c d e") == "3"
