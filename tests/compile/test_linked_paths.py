"""A file reached through a symbolic link is compiled again when the link is retargeted.

The files an agent read are recorded by their real path, and a retargeted link leaves each
of them unchanged: the path that resolved through the link is recorded too, with where it
led, so that a kept build (with or without a watcher's report) and the compile cache see
the change as a fresh compile does.
"""

from __future__ import annotations

import functools
import os
import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from openprogram_yaml.compile import cache
from openprogram_yaml.compile.build import Build
from openprogram_yaml.compile.paths import LINK, Resolutions, resolve_inside
from openprogram_yaml.compile.program import Program
from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.compile.readset import RACY_NS
from openprogram_yaml.errors import ConfigError

AGENT = """version: 1
name: a
model: test
methods:
  ask:
    inputs: {q: {type: string}}
    prompt_file: ../via/ask.j2
    response_schema: {$ref: ../via/answer.json}
"""


def _project(root: Path) -> None:
    (root / "agents").mkdir(parents=True)
    (root / "openprogram.yaml").write_text("version: 1\nagents: [agents/*.yaml]\n")
    (root / "agents" / "a.yaml").write_text(AGENT, encoding="utf-8")
    for version, kind in (("v1", "string"), ("v2", "integer")):
        (root / version).mkdir()
        (root / version / "ask.j2").write_text(f"{version} {{{{ q }}}}", encoding="utf-8")
        (root / version / "answer.json").write_text(f'{{"type": "{kind}"}}', encoding="utf-8")
    old = time.time_ns() - 10 * RACY_NS
    for path in root.rglob("*"):
        os.utime(path, ns=(old, old))
    (root / "via").symlink_to(root / "v1", target_is_directory=True)


def _seen(program: Program) -> tuple[str, object]:
    method = program.agents["a"].methods["ask"]
    return method.prompt.render({"q": "x"}), method.response_format


def _retarget(root: Path) -> None:
    (root / "via").unlink()
    (root / "via").symlink_to(root / "v2", target_is_directory=True)


@pytest.mark.parametrize("way", ["kept build", "told build", "compile cache"])
def test_a_retargeted_folder_link_is_seen(tmp_path: Path, way: str) -> None:
    root = tmp_path / "project"
    _project(root)
    build = Build()
    compile: Callable[[Path], Program]
    if way == "compile cache":
        compile = cache.compile_cached
    else:
        compile = lambda path: compile_path(path, build=build)  # noqa: E731
    first = _seen(compile(root))
    assert first[0] == "v1 x"
    assert _seen(compile(root)) == first  # kept, or loaded from the cache
    if way == "kept build":
        assert build.agents
    _retarget(root)
    if way == "told build":
        build.report_changes([root / "via"])  # what a watcher of the link's folder reports
    fresh = _seen(compile_path(root))
    assert fresh[0] == "v2 x"
    assert _seen(compile(root)) == fresh


def test_a_link_retargeted_out_of_the_project_is_refused_by_a_kept_build(
    tmp_path: Path,
) -> None:
    root = tmp_path / "project"
    _project(root)
    build = Build()
    compile_path(root, build=build)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "ask.j2").write_text("secret {{ q }}", encoding="utf-8")
    (root / "via").unlink()
    (root / "via").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ConfigError, match="leaves the project root"):
        compile_path(root, build=build)


def test_resolutions_record_the_paths_that_went_through_a_link(tmp_path: Path) -> None:
    root = tmp_path / "project"
    _project(root)
    base = root / "agents" / "a.yaml"
    resolutions = Resolutions()
    for _ in range(2):  # the second time from what this compile remembered
        lookups: dict[str, str] = {}
        for name in ("../v1/ask.j2", "../via/ask.j2", "../agents/../v1/ask.j2", "../nope"):
            assert resolutions.resolve_inside(base, name, root, lookups) == resolve_inside(
                base, name, root
            )
        named = os.path.join(base.parent, "../via/ask.j2")
        assert lookups == {named: LINK + str(root / "v1" / "ask.j2")}


INCLUDING = """version: 1
name: a
model: test
methods:
  ask:
    inputs: {q: {type: string}}
    prompt: "{% include 'part.j2' %}"
"""


@pytest.mark.parametrize("way", ["kept build", "told build"])
def test_a_retargeted_link_to_an_included_template_is_seen(tmp_path: Path, way: str) -> None:
    root = tmp_path / "project"
    (root / "agents").mkdir(parents=True)
    (root / "openprogram.yaml").write_text("version: 1\nagents: [agents/*.yaml]\n")
    (root / "agents" / "a.yaml").write_text(INCLUDING, encoding="utf-8")
    (root / "agents" / "one.j2").write_text("one {{ q }}", encoding="utf-8")
    (root / "agents" / "two.j2").write_text("two {{ q }}", encoding="utf-8")
    old = time.time_ns() - 10 * RACY_NS
    for path in root.rglob("*"):
        os.utime(path, ns=(old, old))
    link = root / "agents" / "part.j2"
    link.symlink_to("one.j2")
    build = Build()
    assert _seen(compile_path(root, build=build))[0] == "one x"
    assert _seen(compile_path(root, build=build))[0] == "one x"
    link.unlink()
    link.symlink_to("two.j2")
    if way == "told build":
        build.report_changes([link])
    assert _seen(compile_path(root))[0] == "two x"
    assert _seen(compile_path(root, build=build))[0] == "two x"


def test_a_retargeted_template_folder_link_is_seen_by_the_compile_cache(tmp_path: Path) -> None:
    root = tmp_path / "project"
    (root / "agents").mkdir(parents=True)
    project = "version: 1\nagents: [agents/*.yaml]\ntemplates: [prompts]\n"
    (root / "openprogram.yaml").write_text(project, encoding="utf-8")
    (root / "agents" / "a.yaml").write_text(INCLUDING, encoding="utf-8")
    for version in ("v1", "v2"):
        (root / version).mkdir()
        (root / version / "part.j2").write_text(f"{version} {{{{ q }}}}", encoding="utf-8")
    old = time.time_ns() - 10 * RACY_NS
    for path in root.rglob("*"):
        os.utime(path, ns=(old, old))
    (root / "prompts").symlink_to(root / "v1", target_is_directory=True)
    assert _seen(cache.compile_cached(root))[0] == "v1 x"
    assert _seen(cache.compile_cached(root))[0] == "v1 x"
    (root / "prompts").unlink()
    (root / "prompts").symlink_to(root / "v2", target_is_directory=True)
    assert _seen(compile_path(root))[0] == "v2 x"
    assert _seen(cache.compile_cached(root))[0] == "v2 x"


CASES_AND_FOUND_SCHEMA = """version: 1
name: a
model: test
methods:
  ask:
    inputs: {q: {type: string}}
    prompt: "{{ q }}"
    response_schema: {$ref: answer.json}
tests:
  - name: from the data
    method: ask
    cases: ../data/cases.jsonl
"""


def test_a_found_schema_and_a_cases_file_through_links_are_seen_by_the_compile_cache(
    tmp_path: Path,
) -> None:
    root = tmp_path / "project"
    (root / "agents").mkdir(parents=True)
    (root / "schemas").mkdir()
    project = "version: 1\nagents: [agents/*.yaml]\nschemas: [schemas]\n"
    (root / "openprogram.yaml").write_text(project, encoding="utf-8")
    (root / "agents" / "a.yaml").write_text(CASES_AND_FOUND_SCHEMA, encoding="utf-8")
    for version, kind in (("v1", "string"), ("v2", "integer")):
        (root / version).mkdir()
        (root / version / "answer.json").write_text(f'{{"type": "{kind}"}}', encoding="utf-8")
        case = f'{{"name": "{version}", "inputs": {{"q": "x"}}}}\n'
        (root / version / "cases.jsonl").write_text(case, encoding="utf-8")
    old = time.time_ns() - 10 * RACY_NS
    for path in root.rglob("*"):
        os.utime(path, ns=(old, old))
    (root / "schemas" / "answer.json").symlink_to(root / "v1" / "answer.json")
    (root / "data").symlink_to(root / "v1", target_is_directory=True)

    def seen(program: Program) -> tuple[object, list[str]]:
        return _seen(program)[1], sorted(test.name for test in program.tests)

    first = seen(cache.compile_cached(root))
    assert seen(cache.compile_cached(root)) == first
    for link in (root / "schemas" / "answer.json", root / "data"):  # one, then the other
        target = os.readlink(link).replace("v1", "v2")
        link.unlink()
        link.symlink_to(target)
        fresh = seen(compile_path(root))
        assert fresh != first
        assert seen(cache.compile_cached(root)) == fresh
        first = fresh


def _link(path: Path, target: Path | str) -> None:
    if path.is_symlink() or path.exists():
        path.unlink()
    path.symlink_to(target)


class _Repo:
    """Agents reaching files through three links; every write gets a later, settled stamp."""

    def __init__(self, top: Path, rng: random.Random) -> None:
        self.top, self.root, self.rng = top, top / "p", rng
        self.clock = time.time() - 3600.0
        #: Paths written or retargeted since the last compile (what a watcher reports).
        self.touched: set[Path] = set()
        self.write(self.root / "openprogram.yaml", PROJECT_WITH_SCHEMAS)
        for version, kind in (("v1", "string"), ("v2", "integer")):
            self.write(self.root / version / "ask.j2", f"{version} ask {{{{ q }}}}")
            self.write(self.root / version / "answer.json", f'{{"type": "{kind}"}}')
            self.write(self.root / version / "part.j2", f"{version} part {{{{ q }}}}")
        self.write(top / "out" / "ask.j2", "outside {{ q }}")
        for i in range(3):
            self.write(self.root / "agents" / f"a{i}.yaml", self.agent(i))
        (self.root / "s").mkdir()
        self.link(self.root / "via", self.root / "v1")
        self.link(self.root / "agents" / "part.j2", self.root / "v1" / "part.j2")
        self.link(self.root / "s" / "a.json", self.root / "v1" / "answer.json")

    def agent(self, i: int) -> str:
        prompt = self.rng.choice(
            ["prompt_file: ../via/ask.j2", "prompt: \"{% include 'part.j2' %}\"", "prompt: x"]
        )
        schema = self.rng.choice(["", "{$ref: ../via/answer.json}", "{$ref: a.json}"])
        return (
            f"version: 1\nname: a{i}\nmodel: test\nmethods:\n  ask:\n"
            f"    inputs: {{q: {{type: string}}}}\n    {prompt}\n"
            + (f"    response_schema: {schema}\n" if schema else "")
        )

    def write(self, path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        self.clock += 1.0
        os.utime(path, (self.clock, self.clock))
        self.touched.add(path)

    def link(self, path: Path, target: Path | str) -> None:
        _link(path, target)
        self.touched.add(path)

    def edit(self, step: int) -> str:
        root, rng = self.root, self.rng
        kind = rng.choice(["via", "part", "schema", "edit", "agent"])
        if kind == "via":
            self.link(root / "via", rng.choice([root / "v1", root / "v2", self.top / "out"]))
        elif kind == "part":
            # Absolute, relative, and dangling links.
            targets: list[Path | str] = [root / "v1" / "part.j2", "../v2/part.j2", "gone.j2"]
            self.link(root / "agents" / "part.j2", rng.choice(targets))
        elif kind == "schema":
            version = rng.choice(["v1", "v2"])
            self.link(root / "s" / "a.json", root / version / "answer.json")
        elif kind == "edit":
            version = rng.choice(["v1", "v2"])
            self.write(root / version / "ask.j2", f"{version} ask {step} {{{{ q }}}}")
        else:
            i = rng.randrange(3)
            self.write(root / "agents" / f"a{i}.yaml", self.agent(i))
        return kind


PROJECT_WITH_SCHEMAS = "version: 1\nagents: [agents/*.yaml]\nschemas: [s]\n"


def _outcome(compile: Callable[[Path], Program], path: Path) -> object:
    try:
        program = compile(path)
    except ConfigError as exc:
        return sorted(d.message for d in exc.diagnostics)
    return sorted(
        (name, method.prompt.render({"q": "x"}), method.response_format)
        for name, agent in program.agents.items()
        for method in agent.methods.values()
    )


def test_kept_builds_and_the_cache_agree_with_a_fresh_compile_as_links_are_retargeted(
    tmp_path: Path,
) -> None:
    for seed in range(6):
        repo = _Repo(tmp_path / f"repo{seed}", random.Random(seed))
        kept, told = Build(), Build()
        for step in range(30):
            where = (seed, step, repo.edit(step))
            fresh = _outcome(compile_path, repo.root)
            assert _outcome(functools.partial(compile_path, build=kept), repo.root) == fresh, where
            told.report_changes(repo.touched)
            repo.touched = set()
            assert _outcome(functools.partial(compile_path, build=told), repo.root) == fresh, where
            assert _outcome(cache.compile_cached, repo.root) == fresh, where
