"""A file's stamp (mtime, size) vouches for its contents only once the file has settled.

A file modified within the racy window before it was read, or whose file system keeps
whole seconds, may change again within the same timestamp tick with the same size; what
was read from it then must not be kept by its stamp: not by a kept build's agents, nor by
the template engine's checked templates and files.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from openprogram_yaml.compile.build import Build
from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.compile.readset import RACY_NS, file_reads

AGENT = """version: 1
name: a
model: test
methods:
  ask:
    inputs: {q: {type: string}}
    prompt: "{% include 'part.j2' %}"
"""

SECOND = 1_000_000_000


def _render(build: Build | None, agent: Path) -> str:
    program = compile_path(agent, build=build)
    return program.agents["a"].methods["ask"].prompt.render({"q": "x"})


def test_an_include_rewritten_within_its_tick_is_read_again_by_a_kept_build(
    tmp_path: Path,
) -> None:
    agent = tmp_path / "a.yaml"
    agent.write_text(AGENT, encoding="utf-8")
    old = time.time_ns() - 10 * RACY_NS
    os.utime(agent, ns=(old, old))
    part = tmp_path / "part.j2"
    part.write_text("ONE {{ q }}", encoding="utf-8")
    # Saved as it is read (stamped a little ahead of the compile, whatever the machine's
    # load): racy.
    racy = time.time_ns() + 10 * RACY_NS + 1
    os.utime(part, ns=(racy, racy))
    build = Build()
    assert _render(build, agent) == "ONE x"
    part.write_text("TWO {{ q }}", encoding="utf-8")  # the same size, in the same tick
    os.utime(part, ns=(racy, racy))
    assert _render(None, agent) == "TWO x"
    assert _render(build, agent) == "TWO x"


def test_a_settled_include_is_still_kept_by_its_stamp(tmp_path: Path) -> None:
    agent = tmp_path / "a.yaml"
    agent.write_text(AGENT, encoding="utf-8")
    part = tmp_path / "part.j2"
    part.write_text("ONE {{ q }}", encoding="utf-8")
    old = time.time_ns() - 10 * RACY_NS
    for path in (agent, part):
        os.utime(path, ns=(old, old))
    build = Build()
    first = compile_path(agent, build=build).agents["a"]
    assert compile_path(agent, build=build).agents["a"].methods["ask"].prompt.files == (
        first.methods["ask"].prompt.files
    )
    assert build.agents  # kept: every file it read had settled


def test_a_whole_second_stamp_is_not_settled_until_a_tick_of_two_seconds_has_passed(
    tmp_path: Path,
) -> None:
    # A file system keeping whole seconds (two on FAT) shows a save at 10.7 s as 10 s: 50 ms
    # after the save, the stamp looks a second old, and a second save at 10.9 s keeps it.
    path = tmp_path / "f.txt"
    path.write_text("one\n", encoding="utf-8")
    started = time.time_ns()
    whole = (started // SECOND - 1) * SECOND  # 1 to 2 s before the compile began
    os.utime(path, ns=(whole, whole))
    assert not file_reads([path], started)[1]
    older = whole - 2 * SECOND
    os.utime(path, ns=(older, older))
    assert file_reads([path], started)[1]
    # A finer stamp as old as the first is settled, as before.
    os.utime(path, ns=(whole + 1, whole + 1))
    assert file_reads([path], started)[1]


def test_an_agent_file_replaced_while_it_compiles_is_not_kept_by_the_new_files_stamp(
    tmp_path: Path, monkeypatch
) -> None:
    # The compile imports a python tool's module after reading the agent file; this one
    # replaces the file, as `cp -p` or `rsync -a` would: new text of the same size, with an
    # older time. The read-set took the file's stamp after the compile, so it paired the
    # new file's stamp with the old text: the compile cache kept the old program, and every
    # later run was served it.
    from openprogram_yaml.compile.cache import compile_cached

    monkeypatch.setenv("OPENPROGRAM_CACHE_DIR", str(tmp_path / "cache"))
    tmp_path = tmp_path / "project"  # the cache is kept outside the project
    tmp_path.mkdir()
    agent = tmp_path / "a.yaml"
    text = (
        "version: 1\nname: a\nmodel: test\n"
        "tools:\n  t: {python: 'swapper_mid_compile:t'}\n"
        "methods:\n  ask: {prompt: ONE}\n"
    )
    agent.write_text(text, encoding="utf-8")
    old = time.time_ns() - 100 * SECOND
    os.utime(agent, ns=(old, old))
    (tmp_path / "swapper_mid_compile.py").write_text(
        "import os\n"
        f"path = {str(agent)!r}\n"
        "with open(path, encoding='utf-8') as f:\n"
        "    text = f.read()\n"
        "if 'prompt: ONE' in text:\n"
        "    with open(path + '.new', 'w', encoding='utf-8') as f:\n"
        "        f.write(text.replace('prompt: ONE', 'prompt: TWO'))\n"
        f"    os.utime(path + '.new', ns=({old - 50 * SECOND}, {old - 50 * SECOND}))\n"
        "    os.replace(path + '.new', path)\n"
        "def t() -> str:\n"
        "    return 'x'\n",
        encoding="utf-8",
    )
    os.utime(tmp_path / "swapper_mid_compile.py", ns=(old, old))  # settled: kept by stamp
    monkeypatch.syspath_prepend(str(tmp_path))
    first = compile_cached(agent)
    assert first.agents["a"].methods["ask"].prompt.render({}) == "ONE"
    assert "prompt: TWO" in agent.read_text(encoding="utf-8")
    again = compile_cached(agent)
    assert again.agents["a"].methods["ask"].prompt.render({}) == "TWO"
