"""What one compile shares between its agents gives what each agent alone would.

A compile of many agents hashes a file they all read once while its stamp holds, and
resolves the folder of agent files side by side once; these tests compare each shortcut
with the general path.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from openprogram_yaml.compile.context import ProjectContext
from openprogram_yaml.compile.paths import Resolutions, resolve_inside
from openprogram_yaml.compile.project import compile_agent_files, compile_path
from openprogram_yaml.compile.readset import RACY_NS, file_reads
from openprogram_yaml.compile.templates import _resolved, _resolved_folder
from openprogram_yaml.errors import ConfigError, Diagnostic

AGENT = """version: 1
name: {name}
model: test
methods:
  ask:
    inputs: {{q: {{type: string}}}}
    prompt_file: ../shared/ask.j2
"""


def _settle(*paths: Path) -> None:
    # Stamps older than the racy window, as files saved a while before the compile.
    old = time.time_ns() - 10 * RACY_NS
    for path in paths:
        os.utime(path, ns=(old, old))


def test_shared_digests_agree_with_hashing_each_file(tmp_path: Path) -> None:
    files = []
    for i in range(3):
        path = tmp_path / f"f{i}.txt"
        path.write_text(f"text {i}\n", encoding="utf-8")
        files.append(path)
    _settle(*files)
    started = time.time_ns()
    known: dict[tuple[str, int, int], str] = {}
    for subset in ([files[0], files[1]], [files[1], files[2]], files):
        assert file_reads(subset, started, known) == file_reads(subset, started)
    assert len(known) == 3  # each file hashed once


def test_a_changed_file_is_hashed_again(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    path.write_text("one\n", encoding="utf-8")
    _settle(path)
    known: dict[tuple[str, int, int], str] = {}
    first, _ = file_reads([path], time.time_ns(), known)
    path.write_text("other\n", encoding="utf-8")
    _settle(path)
    os.utime(path, ns=(first[0][1] + 1, first[0][1] + 1))  # a new stamp
    again, _ = file_reads([path], time.time_ns(), known)
    assert again == file_reads([path], time.time_ns())[0]
    assert again[0][3] != first[0][3]


def test_racy_files_are_not_shared(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    path.write_text("fresh\n", encoding="utf-8")  # just written: within the racy window
    known: dict[tuple[str, int, int], str] = {}
    reads, settled = file_reads([path], time.time_ns(), known)
    assert not settled and not known
    assert reads == file_reads([path], time.time_ns())[0]


def test_a_text_read_stands_for_its_settled_file(tmp_path: Path) -> None:
    # An agent file's digest comes from the text the compile parsed: the same as hashing
    # the file while it is settled; a file still within the racy window is hashed.
    path = tmp_path / "a.yaml"
    path.write_bytes("\ufeffname: café ✓\r\n".encode())
    _settle(path)
    text = path.read_bytes().decode("utf-8")
    started = time.time_ns()
    assert file_reads([path], started, texts={str(path): text}) == file_reads([path], started)
    fresh = tmp_path / "b.yaml"
    fresh.write_text("new\n", encoding="utf-8")
    started = time.time_ns()
    reads, settled = file_reads([fresh], started, texts={str(fresh): "old\n"})
    assert not settled and reads == file_reads([fresh], started)[0]


@pytest.mark.parametrize("kind", ["plain", "linked file", "linked folder", "missing"])
def test_resolved_folder_is_the_resolved_files_folder(tmp_path: Path, kind: str) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "agent.yaml").write_text("x", encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if kind == "plain":
        path = real / "agent.yaml"
    elif kind == "linked file":
        path = elsewhere / "link.yaml"
        path.symlink_to(real / "agent.yaml")
    elif kind == "linked folder":
        (tmp_path / "via").symlink_to(real, target_is_directory=True)
        path = tmp_path / "via" / "agent.yaml"
    else:
        path = real / "missing.yaml"
    assert _resolved_folder(str(path)) == _resolved(str(path)).parent
    relative = os.path.relpath(path)
    assert _resolved_folder(relative) == _resolved(relative).parent


def test_a_linked_agent_file_includes_from_its_targets_folder(tmp_path: Path) -> None:
    (tmp_path / "openprogram.yaml").write_text("version: 1\nagents: [agents/*.yaml]\n")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "ask.j2").write_text("Q: {{ q }}\n", encoding="utf-8")
    (tmp_path / "agents").mkdir()
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "a.yaml").write_text(AGENT.format(name="a"), encoding="utf-8")
    (tmp_path / "agents" / "a.yaml").symlink_to(tmp_path / "real" / "a.yaml")
    (tmp_path / "agents" / "b.yaml").write_text(AGENT.format(name="b"), encoding="utf-8")
    program = compile_path(tmp_path)
    assert sorted(program.agents) == ["a", "b"]
    prompt = program.agents["a"].methods["ask"].prompt
    assert prompt.render({"q": "why"}).strip() == "Q: why"


def test_shared_resolutions_agree_with_resolving_each_time(tmp_path: Path) -> None:
    root = tmp_path / "project"
    (root / "agents").mkdir(parents=True)
    (root / "shared").mkdir()
    (root / "shared" / "ask.j2").write_text("x", encoding="utf-8")
    (root / "agents" / "linked").symlink_to(root / "shared", target_is_directory=True)
    (root / "agents" / "out").symlink_to(tmp_path, target_is_directory=True)
    resolutions = Resolutions()
    names = [
        "../shared/ask.j2",
        "linked/ask.j2",
        "../shared/missing.j2",
        "out/project/shared/ask.j2",  # leaves through a link, comes back: inside
        "out/elsewhere.j2",
        "../../x",
        "/etc/passwd",
        "http://example.com/x",
    ]
    for agent in ("a.yaml", "b.yaml"):
        base = root / "agents" / agent
        for name in names * 2:
            assert resolutions.resolve_inside(base, name, root) == resolve_inside(base, name, root)


def test_a_link_changed_between_compiles_is_seen(tmp_path: Path) -> None:
    root = tmp_path / "project"
    (root / "shared").mkdir(parents=True)
    (root / "openprogram.yaml").write_text("version: 1\nagents: [agents/*.yaml]\n")
    (root / "shared" / "ask.j2").write_text("Q: {{ q }}\n", encoding="utf-8")
    (root / "agents").mkdir()
    (root / "agents" / "a.yaml").write_text(
        AGENT.format(name="a").replace("../shared/ask.j2", "../via/ask.j2"), encoding="utf-8"
    )
    (root / "via").symlink_to(root / "shared", target_is_directory=True)
    assert compile_path(root).agents["a"].methods["ask"].prompt.render({"q": "1"})
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "ask.j2").write_text("secret {{ q }}\n", encoding="utf-8")
    (root / "via").unlink()
    (root / "via").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ConfigError, match="leaves the project root"):
        compile_path(root)


def test_a_linked_agent_files_inline_template_includes_beside_its_target(tmp_path: Path) -> None:
    (tmp_path / "openprogram.yaml").write_text("version: 1\nagents: [agents/*.yaml]\n")
    (tmp_path / "agents").mkdir()
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "part.j2").write_text("part {{ q }}", encoding="utf-8")
    text = AGENT.format(name="a").replace(
        "prompt_file: ../shared/ask.j2", "prompt: '{% include \"part.j2\" %}!'"
    )
    (tmp_path / "real" / "a.yaml").write_text(text, encoding="utf-8")
    (tmp_path / "agents" / "a.yaml").symlink_to(tmp_path / "real" / "a.yaml")
    prompt = compile_path(tmp_path).agents["a"].methods["ask"].prompt
    assert prompt.render({"q": "x"}) == "part x!"
    assert prompt.files == frozenset({tmp_path.resolve() / "real" / "part.j2"})


SCHEMA_AGENT = """version: 1
name: {name}
model: test
methods:
  ask:
    inputs:
      q: {schema}
      n: {{type: integer, default: 1}}
    prompt: "{{{{ q }}}}"
    response_schema: {{$ref: ../schemas/label.json}}
"""
SCHEMAS = [
    "{type: string}",
    "{type: string, maxLength: 1}",
    "{type: string, maxLength: 1.0}",  # a float: not the schema above
    "{type: string, maxLength: '1'}",  # a string: a problem, at this agent's place
    "{type: strin}",  # a problem
    "{$ref: ../schemas/q.json}",
    "{$ref: ../schemas/missing.json}",  # a problem
    "{type: [string, boolean, integer], default: true}",
    "{type: [string, boolean, integer], default: 1}",  # not the schema above
]


def _schema_repository(root: Path, folders: tuple[str, ...]) -> None:
    (root / "openprogram.yaml").write_text("version: 1\nagents: [a/*.yaml, b/c/*.yaml]\n")
    (root / "schemas").mkdir()
    (root / "schemas" / "label.json").write_text('{"type": "string", "enum": ["a", "b"]}')
    (root / "schemas" / "q.json").write_text('{"type": "string", "$defs": {"x": {}}}')
    for folder in folders:
        (root / folder).mkdir(parents=True)
        for i, schema in enumerate(SCHEMAS * 2):
            text = SCHEMA_AGENT.format(name=f"{folder[0]}_{i}", schema=schema)
            (root / folder / f"a{i}.yaml").write_text(text, encoding="utf-8")


def test_shared_schemas_agree_with_bundling_each_alone(tmp_path: Path) -> None:
    # The same inline schemas in many agents, in two folders (a $ref is relative to its
    # file's folder): each agent's problems at its own place, each valid schema as if the
    # agent were compiled alone, and a copy of its own.
    root = tmp_path / "project"
    root.mkdir()
    _schema_repository(root, ("a", "b/c"))
    (root / "b" / "schemas").mkdir()
    (root / "b" / "schemas" / "label.json").write_text('{"type": "integer"}')
    (root / "b" / "schemas" / "q.json").write_text('{"type": "number"}')
    with pytest.raises(ConfigError) as together:
        compile_path(root)
    ctx = ProjectContext(root.resolve())
    alone: list[str] = []
    for path in [*sorted(root.glob("a/*.yaml")), *sorted(root.glob("b/c/*.yaml"))]:
        try:
            compile_agent_files([path.resolve()], context=ctx)
        except ConfigError as exc:
            alone += [str(d) for d in exc.diagnostics]
    assert [str(d) for d in together.value.diagnostics] == alone
    assert len(alone) == 3 * 2 * 2  # three problems, in two copies, in two folders

    for folder in ("a", "b/c"):
        for path in (root / folder).glob("a*.yaml"):
            if int(path.stem[1:]) % len(SCHEMAS) in (3, 4, 6):
                path.unlink()
    program = compile_path(root)
    assert len(program.agents) == 24
    for name, agent in program.agents.items():
        folder, i = {"a": "a", "b": "b/c"}[name[0]], name[2:]
        each = compile_agent_files([root.resolve() / folder / f"a{i}.yaml"], context=ctx)
        each_agent = each.agents[name]
        for method, own in agent.methods.items():
            assert own.input_schema == each_agent.methods[method].input_schema
            assert own.response_format == each_agent.methods[method].response_format
        assert each.files <= program.files
    first, second = program.agents["a_0"], program.agents["a_9"]
    assert first.methods["ask"].inputs == second.methods["ask"].inputs
    assert first.methods["ask"].inputs["q"] is not second.methods["ask"].inputs["q"]
    schema: dict[str, Any] = {n: a.methods["ask"].inputs["q"] for n, a in program.agents.items()}
    assert schema["a_5"]["type"] == "string"
    assert schema["b_5"]["type"] == "number"
    assert schema["a_1"]["maxLength"] == 1
    assert isinstance(schema["a_2"]["maxLength"], float)
    assert schema["a_7"]["default"] is True
    assert schema["a_8"]["default"] == 1 and schema["a_17"]["default"] is not True


def test_shared_prompt_files_agree_with_reading_each_alone(tmp_path: Path) -> None:
    # Agents in two folders name the same template files by different relative paths; a
    # file that is not UTF-8 is reported for each agent naming it, as a missing one is.
    root = tmp_path / "project"
    (root / "shared").mkdir(parents=True)
    (root / "shared" / "ask.j2").write_text("Q: {{ q }}\n", encoding="utf-8")
    (root / "shared" / "sys.j2").write_text("Be brief about {{ q }}.\n", encoding="utf-8")
    (root / "shared" / "bad.j2").write_bytes(b"Q: \xff {{ q }}\n")
    (root / "openprogram.yaml").write_text("version: 1\nagents: [a/*.yaml, b/c/*.yaml]\n")
    for folder, up in (("a", "../shared"), ("b/c", "../../shared")):
        (root / folder).mkdir(parents=True)
        for i, name in enumerate(["ask.j2", "bad.j2", "missing.j2", "ask.j2", "bad.j2"]):
            text = AGENT.format(name=f"{folder[0]}_{i}").replace("../shared/ask.j2", f"{up}/{name}")
            text += f"instructions_file: {up}/sys.j2\n"
            (root / folder / f"a{i}.yaml").write_text(text, encoding="utf-8")
    ctx = ProjectContext(root.resolve())
    files = [*sorted(root.glob("a/*.yaml")), *sorted(root.glob("b/c/*.yaml"))]
    with pytest.raises(ConfigError) as together:
        compile_path(root)
    alone: list[Diagnostic] = []
    for path in files:
        try:
            compile_agent_files([path.resolve()], context=ctx)
        except ConfigError as exc:
            alone += exc.diagnostics
    assert together.value.diagnostics == ConfigError(alone).diagnostics  # in the same order
    assert len(alone) == 6

    for path in files:
        if path.stem in ("a1", "a2", "a4"):
            path.unlink()
    program = compile_path(root)
    assert sorted(program.agents) == ["a_0", "a_3", "b_0", "b_3"]
    for name, agent in program.agents.items():
        folder = {"a": "a", "b": "b/c"}[name[0]]
        each = compile_agent_files([root.resolve() / folder / f"a{name[2:]}.yaml"], context=ctx)
        own, single = agent.methods["ask"], each.agents[name].methods["ask"]
        assert own.prompt.render({"q": "why"}) == single.prompt.render({"q": "why"}) == "Q: why\n"
        assert own.prompt.origin == single.prompt.origin
        assert own.instructions is not None and single.instructions is not None
        assert own.instructions.origin == single.instructions.origin
        assert agent.files == each.agents[name].files


def _one_compile(root: Path, share: Callable[[Any], None]) -> Callable[[int], Any]:
    """Compiles agent ``a/a{i}.yaml`` of ``root`` as one compile does, agent by agent, with
    what ``share`` puts in each agent's collector (what the compile's agents share)."""
    from openprogram_yaml.compile.agent import compile_agent
    from openprogram_yaml.compile.build import Build
    from openprogram_yaml.compile.context import Collector
    from openprogram_yaml.spec.loader import load_agent_file

    ctx, build = ProjectContext(root.resolve()), Build()
    build.begin()

    def compile_one(i: int) -> Any:
        col = Collector()
        share(col)
        doc = load_agent_file((root / "a" / f"a{i}.yaml").resolve())
        agent = compile_agent(doc, ctx, col, build)
        assert agent is not None, col.diagnostics
        return agent

    return compile_one


def _replace_with_older(path: Path, text: str) -> None:
    """Writes ``text`` to ``path`` with a settled time older than it had (rsync -a, cp -p)."""
    path.write_text(text, encoding="utf-8")
    older = path.stat().st_mtime_ns - 20 * RACY_NS
    os.utime(path, ns=(older, older))


def test_a_prompt_file_replaced_during_a_compile_is_read_again(tmp_path: Path) -> None:
    # Replaced between two agents of one compile by a file with an older stamp (as rsync -a,
    # cp -p or tar leave it): the stamp is settled, so the later agent's read-set vouches
    # for the file as it is now, and the agent must have been built from that text, not
    # from what the first agent read.
    from openprogram_yaml.compile.context import Collector

    root = tmp_path / "project"
    (root / "shared").mkdir(parents=True)
    (root / "a").mkdir()
    prompt = root / "shared" / "ask.j2"
    prompt.write_text("Q: {{ q }}\n", encoding="utf-8")
    _settle(prompt)
    for i in range(2):
        (root / "a" / f"a{i}.yaml").write_text(AGENT.format(name=f"a_{i}"), encoding="utf-8")
    shared: dict[Path, Any] = {}

    def share(col: Collector) -> None:
        col.prompt_files = shared

    compile_one = _one_compile(root, share)
    first = compile_one(0)
    _replace_with_older(prompt, "Changed: {{ q }}\n")
    second = compile_one(1)
    assert first.methods["ask"].prompt.render({"q": "x"}) == "Q: x\n"
    assert second.methods["ask"].prompt.render({"q": "x"}) == "Changed: x\n"


def test_a_schema_file_replaced_during_a_compile_is_read_again(tmp_path: Path) -> None:
    # As a prompt file above: a schema file (and so every bundle built from it) shared by
    # the agents of a compile is used again only while its stamp holds.
    from openprogram_yaml.compile.context import Collector
    from openprogram_yaml.compile.schemas import SchemaFiles

    root = tmp_path / "project"
    (root / "schemas").mkdir(parents=True)
    (root / "a").mkdir()
    label = root / "schemas" / "label.json"
    label.write_text('{"type": "string"}', encoding="utf-8")
    (root / "schemas" / "q.json").write_text('{"type": "string"}', encoding="utf-8")
    _settle(label, root / "schemas" / "q.json")
    for i in range(2):
        text = SCHEMA_AGENT.format(name=f"a_{i}", schema="{$ref: ../schemas/q.json}")
        (root / "a" / f"a{i}.yaml").write_text(text, encoding="utf-8")
    schema_files, resolutions = SchemaFiles(), Resolutions()

    def share(col: Collector) -> None:
        col.schema_files, col.resolutions = schema_files, resolutions

    compile_one = _one_compile(root, share)
    first = compile_one(0)
    _replace_with_older(label, '{"type": "integer"}')
    second = compile_one(1)
    assert first.methods["ask"].response_format["schema"] == {"type": "string"}
    assert second.methods["ask"].response_format["schema"] == {"type": "integer"}
