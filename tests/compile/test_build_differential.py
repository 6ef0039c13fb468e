"""A compile that reuses what it kept agrees with one that reads everything anew.

Seeded random edits to a small repository (agent files added, removed and changed, templates
changed, an include appearing in an earlier template folder, project files appearing in
parent folders, environment variables set and unset); after each, the same path is compiled
four ways: with a fresh build, with one build kept across every step (as the reload keeps
it), with one kept and told which paths each step wrote (as the reload's watcher tells it),
and through the compile cache on disk. All give the same problems, or programs with the
same fingerprint. The whole project is compiled too, so what one compile shares between
its agents (a prompt file, the same inline schemas and ``$ref``s bundled once, an agent
file's digest taken from the text parsed, with a byte order mark and CRLF or not) meets the
same edits.
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
from openprogram_yaml.compile.program import Program
from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.errors import ConfigError

PROJECT = "version: 1\nagents: [agents/*.yaml]\ntemplates: [t1, t2]\nschemas: [schemas]\n"
BROKEN_PROJECT = "version: 1\nagnets: [agents/*.yaml]\n"
PROMPTS = [
    "Hello {{ who }}",
    "Hi {{ who }}, {{ greeting }}",
    '{% include "part.j2" %} {{ who }}',
    "Bye {{ whom }}",  # reads what no method declares
    "FILE",  # prompt_file: ../shared/ask.j2, which many agents name
]
ASKS = ["Ask {{ who }}", "Ask {{ whom }}", "Ask {{ greeting }}!"]
WHO = ['{"type": "string"}', '{"type": "strin"}', '{"type": "string", "maxLength": 3}']
PARTS = ["part says {{ who }}", "part says {{ greeting }}", "part reads {{ nobody }}"]


def agent_yaml(name: str, prompt: str, schema: bool, crlf: bool = False) -> str:
    response = "    response_schema: {$ref: ../schemas/label.json}\n" if schema else ""
    who = "{$ref: ../schemas/who.json}" if schema else "{type: string}"
    said = "prompt_file: ../shared/ask.j2" if prompt == "FILE" else f"prompt: '{prompt}'"
    text = (
        f"version: 1\nname: {name}\nmodel: test\n"
        "vars:\n  greeting: ${env:GREETING:-Hello}\n"
        f"methods:\n  greet:\n    inputs:\n      who: {who}\n"
        f"    {said}\n{response}"
    )
    # The digest of an agent file is taken from the text parsed: it must be the file's.
    return "\ufeff" + text.replace("\n", "\r\n") if crlf else text


class Repo:
    """The repository under edit; every write gets a later (and settled) timestamp."""

    def __init__(self, top: Path, rng: random.Random) -> None:
        self.top = top
        self.root = top / "a" / "proj"
        self.rng = rng
        self.clock = time.time() - 3600.0
        #: Paths written or removed since the last ``take_touched`` (what a watcher sees).
        self.touched: set[Path] = set()
        for folder in ("agents", "t1", "t2", "schemas", "shared"):
            (self.root / folder).mkdir(parents=True)
        self.write(self.root / "t2" / "part.j2", PARTS[0])
        self.write(self.root / "schemas" / "label.json", '{"type": "object"}')
        self.write(self.root / "schemas" / "who.json", WHO[0])
        self.write(self.root / "shared" / "ask.j2", ASKS[0])
        for i in range(3):
            self.write(self.agent(i), agent_yaml(f"agent_{i}", PROMPTS[i % 3], i == 1))

    def agent(self, i: int) -> Path:
        return self.root / "agents" / f"agent_{i}.yaml"

    def take_touched(self) -> set[Path]:
        touched, self.touched = self.touched, set()
        return touched

    def write(self, path: Path, text: str) -> None:
        self.touched.add(path)
        path.write_bytes(text.encode())
        self.clock += 1.0  # a later stamp than any before: the edit is seen by its stamp
        os.utime(path, (self.clock, self.clock))

    def remove(self, path: Path) -> None:
        if path.exists():
            self.touched.add(path)
            path.unlink()

    def edit(self, monkeypatch: pytest.MonkeyPatch) -> str:
        """One random edit; what it was."""
        rng = self.rng
        kind = rng.choice(
            ["agent", "agent", "add", "remove", "part", "shadow", "schema", "ask", "project", "env"]
        )
        i = rng.randrange(5)
        if kind == "agent" or kind == "add":
            prompt = rng.choice(PROMPTS)
            text = agent_yaml(f"agent_{i}", prompt, rng.random() < 0.5, rng.random() < 0.3)
            self.write(self.agent(i), text)
        elif kind == "remove" and i != 0:  # agent_0 is the path compiled
            self.remove(self.agent(i))
        elif kind == "part":
            self.write(self.root / "t2" / "part.j2", rng.choice(PARTS))
        elif kind == "shadow":  # t1 comes first: a part there hides t2's
            if rng.random() < 0.5:
                self.write(self.root / "t1" / "part.j2", rng.choice(PARTS))
            else:
                self.remove(self.root / "t1" / "part.j2")
        elif kind == "schema":
            if rng.random() < 0.5:
                schema = rng.choice(
                    ['{"type": "object"}', '{"type": "strin"}', '{"type": "array"}']
                )
                self.write(self.root / "schemas" / "label.json", schema)
            else:
                self.write(self.root / "schemas" / "who.json", rng.choice(WHO))
        elif kind == "ask":
            self.write(self.root / "shared" / "ask.j2", rng.choice(ASKS))
        elif kind == "project":
            where = rng.choice([self.root, self.root.parent, self.top])
            choice = rng.random()
            if choice < 0.5:
                self.remove(where / "openprogram.yaml")
            else:
                self.write(where / "openprogram.yaml", PROJECT if choice < 0.9 else BROKEN_PROJECT)
        else:
            if rng.random() < 0.5:
                monkeypatch.delenv("GREETING", raising=False)
            else:
                monkeypatch.setenv("GREETING", rng.choice(["Howdy", "Hey", "Hello"]))
        return kind


def outcome(compile: Callable[[Path], Program], path: Path) -> object:
    """The problems a compile reports, or the fingerprint of the program it gives."""
    try:
        program = compile(path)
    except ConfigError as exc:
        return ("problems", sorted(str(d) for d in exc.diagnostics))
    return (
        "program",
        program.root,
        program.version,
        sorted(program.files),
        {
            name: {
                m: (
                    method.prompt_version,
                    sorted(method.prompt.variables),
                    method.prompt.source,
                    repr(method.input_schema),
                    repr(method.response_format),
                )
                for m, method in agent.methods.items()
            }
            for name, agent in program.agents.items()
        },
    )


@pytest.mark.parametrize("whole", [False, True], ids=["one agent", "the project"])
def test_a_kept_build_and_the_compile_cache_agree_with_a_fresh_compile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, whole: bool
) -> None:
    seen: set[str] = set()
    for seed in range(6):
        monkeypatch.delenv("GREETING", raising=False)
        repo = Repo(tmp_path / f"repo{seed}", random.Random(seed))
        target = repo.root if whole else repo.agent(0)
        kept = Build()
        told = Build()
        for step in range(50):
            done = repo.edit(monkeypatch)
            fresh = outcome(compile_path, target)  # a build of its own
            seen.add(fresh[0])  # type: ignore[index]
            where = (seed, step, done)
            assert outcome(functools.partial(compile_path, build=kept), target) == fresh, where
            told.report_changes(repo.take_touched())
            assert outcome(functools.partial(compile_path, build=told), target) == fresh, where
            assert outcome(cache.compile_cached, target) == fresh, where
    assert seen == {"problems", "program"}  # both kinds of outcome were compared


def test_a_template_appearing_in_an_earlier_folder_recompiles_what_includes_it(
    tmp_path: Path,
) -> None:
    repo = Repo(tmp_path / "repo", random.Random(0))
    repo.write(repo.root / "openprogram.yaml", PROJECT)
    build = Build()
    first = compile_path(repo.root, build=build)
    repo.write(repo.root / "t1" / "part.j2", PARTS[2])
    with pytest.raises(ConfigError, match="nobody"):
        compile_path(repo.root, build=build)
    assert "nobody" not in str(first.agent("agent_2").method("greet").prompt.variables)


def test_a_build_told_what_changed_checks_only_the_agents_that_read_it(tmp_path: Path) -> None:
    repo = Repo(tmp_path / "repo", random.Random(0))
    repo.write(repo.root / "openprogram.yaml", PROJECT)
    build = Build()
    compile_path(repo.root, build=build)
    repo.write(repo.agent(1), agent_yaml("agent_1", PROMPTS[3], False))
    repo.write(repo.agent(2), agent_yaml("agent_2", PROMPTS[1], False))
    # Told of one edit only, the build trusts the report: the other agent is kept unread.
    build.report_changes([repo.agent(2)])
    program = compile_path(repo.root, build=build)
    assert program.agent("agent_2").method("greet").prompt.variables == {"who", "greeting"}
    assert program.agent("agent_1").method("greet").prompt.variables == {"who", "greeting"}
    # A compile nobody reports to checks every read.
    with pytest.raises(ConfigError, match="whom"):
        compile_path(repo.root, build=build)


def test_reports_add_up_across_a_compile_that_failed_before_its_agents(tmp_path: Path) -> None:
    repo = Repo(tmp_path / "repo", random.Random(0))
    repo.write(repo.root / "openprogram.yaml", PROJECT)
    build = Build()
    compile_path(repo.root, build=build)
    repo.write(repo.agent(1), agent_yaml("agent_1", PROMPTS[0], False))
    build.report_changes([repo.agent(1)])
    repo.write(repo.root / "openprogram.yaml", BROKEN_PROJECT)
    with pytest.raises(ConfigError, match="agnets"):
        compile_path(repo.root, build=build)
    repo.write(repo.root / "openprogram.yaml", PROJECT)
    build.report_changes([repo.root / "openprogram.yaml"])
    program = compile_path(repo.root, build=build)
    assert program.agent("agent_1").method("greet").prompt.variables == {"who"}
