"""The compile cache: a program is reused only while nothing its compile read has changed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from loopback import LoopbackServer, json_reply
from support import EXAMPLES, REPO

from openprogram_yaml.compile import cache
from openprogram_yaml.compile.program import Program
from openprogram_yaml.errors import ConfigError
from openprogram_yaml.runner.cli import main

AGENT = """\
version: 1
name: greeter
model: test
vars:
  greeting: ${env:GREETING:-Hello}
methods:
  greet:
    inputs:
      who: {type: string}
    prompt_file: prompts/greet.j2
"""


def settle(root: Path, seconds_ago: float = 10.0) -> None:
    """Date every file and folder under ``root`` (and ``root``) back: an edit made by a
    test a moment before its compile is too recent to trust, and is not kept."""
    then = time.time() - seconds_ago
    for folder, _, names in os.walk(root):
        for name in names:
            os.utime(os.path.join(folder, name), (then, then))
        os.utime(folder, (then, then))


def compiled(path: Path) -> tuple[Program, bool]:
    """The program, and whether it came from the cache."""
    kept = cache.load(path)
    return (kept, True) if kept is not None else (cache.compile_cached(path), False)


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "greet.j2").write_text("{{ greeting }}, {{ who }}!\n")
    path = tmp_path / "greeter.yaml"
    path.write_text(AGENT)
    settle(tmp_path)
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "support_repo", root, ignore=shutil.ignore_patterns("__pycache__"))
    settle(root)
    return root


def test_an_unchanged_agent_is_loaded_not_compiled(agent: Path) -> None:
    first, hit = compiled(agent)
    assert not hit
    second, hit = compiled(agent)
    assert hit
    assert second.version == first.version
    method = second.agent("greeter").method("greet")
    assert method.render({"who": "Ada"})[-1]["text"] == "Hello, Ada!\n"
    assert method.prompt_version == first.agent("greeter").method("greet").prompt_version


def test_a_whole_repository_round_trips(repo: Path) -> None:
    first, _ = compiled(repo)
    second, hit = compiled(repo)
    assert hit
    assert second.files == first.files and second.version == first.version
    assert sorted(second.agents) == sorted(first.agents)
    assert [t.id for t in second.tests] == [t.id for t in first.tests]
    desk = second.agent("desk")
    assert {t.name for t in desk.tools} == {t.name for t in first.agent("desk").tools}


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda a: a.write_text(AGENT.replace("Hello", "Hi")), id="agent file"),
        pytest.param(
            lambda a: (a.parent / "prompts" / "greet.j2").write_text("Hey {{ who }}\n"),
            id="template",
        ),
        pytest.param(
            lambda a: (a.parent / "openprogram.yaml").write_text(
                "version: 1\nagents: [greeter.yaml]\n"
            ),
            id="project file added where the search found none",
        ),
    ],
)
def test_a_change_to_what_the_compile_read_compiles_again(agent: Path, change) -> None:  # type: ignore[no-untyped-def]
    compiled(agent)
    change(agent)
    settle(agent.parent)  # even dated back, the change shows (size, listing or digest)
    program, hit = compiled(agent)
    assert not hit
    assert compiled(agent)[1]  # and the new program is kept
    assert program.agent("greeter").method("greet").prompt is not None


def test_a_file_added_that_no_lookup_looked_at_keeps_the_entry(agent: Path) -> None:
    # A folder's listing matters only to lookups in it: an editor's backup file, or a
    # template nobody includes, changes nothing the compile read.
    compiled(agent)
    (agent.parent / "prompts" / "new.j2").write_text("x")
    (agent.parent / "greeter.yaml~").write_text("x")
    settle(agent.parent)
    assert compiled(agent)[1]


def test_an_edit_that_keeps_size_and_time_is_seen_through_the_digest(agent: Path) -> None:
    compiled(agent)
    template = agent.parent / "prompts" / "greet.j2"
    stamp = os.stat(template)
    template.write_text("{{ greeting }}; {{ who }}!\n")  # same size
    os.utime(template, ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 1))
    program, hit = compiled(agent)
    assert not hit
    assert program.agent("greeter").method("greet").render({"who": "Ada"})[-1]["text"] == (
        "Hello; Ada!\n"
    )


def test_touching_a_file_without_changing_it_keeps_the_entry(agent: Path) -> None:
    compiled(agent)
    settle(agent.parent, seconds_ago=5.0)  # new times, same contents (a git checkout)
    assert compiled(agent)[1]


def test_an_environment_variable_the_files_name_is_part_of_the_key(
    agent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled(agent)
    monkeypatch.setenv("GREETING", "Howdy")
    program, hit = compiled(agent)
    assert not hit
    assert program.agent("greeter").method("greet").render({"who": "Ada"})[-1]["text"] == (
        "Howdy, Ada!\n"
    )
    monkeypatch.setenv("UNRELATED", "1")
    assert compiled(agent)[1]


def test_the_working_folder_is_part_of_the_key(
    agent: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled(agent)
    monkeypatch.chdir(tmp_path / "prompts")  # messages show paths relative to it
    assert not compiled(agent)[1]


def test_a_new_agent_file_matching_the_projects_pattern_is_seen(repo: Path) -> None:
    compiled(repo)
    extra = repo / "agents" / "extra.yaml"
    extra.write_text(AGENT.replace("prompt_file: prompts/greet.j2", "prompt: 'Hi {{ who }}'"))
    settle(repo)
    program, hit = compiled(repo)
    assert not hit
    assert "greeter" in program.agents


def test_a_file_changed_while_it_was_compiled_is_not_kept(agent: Path) -> None:
    agent.write_text(AGENT)  # modified just now: another save may follow within the tick
    compiled(agent)
    assert not compiled(agent)[1]
    settle(agent.parent)
    compiled(agent)
    assert compiled(agent)[1]


def test_a_program_holding_a_secret_is_never_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVICE_TOKEN", "tok-123456789")
    path = tmp_path / "secret.yaml"
    path.write_text(
        "version: 1\nname: s\nmodel: test\n"
        "tools:\n  lookup:\n    description: look up\n"
        "    http: {url: 'http://127.0.0.1:9/x',\n"
        "           headers: {Authorization: 'Bearer ${env:SERVICE_TOKEN}'}}\n"
        "methods:\n  m:\n    prompt: hi\n"
    )
    settle(tmp_path)
    program = cache.compile_cached(path)
    assert program.agent("s").secrets
    folder = cache.cache_folder()
    assert folder is not None
    assert not any(folder.iterdir())
    assert cache.load(path) is None


HTTP_AGENT = """\
version: 1
name: shop
model: test
tools:
  lookup:
    description: Look an order up.
    parameters: {type: object, properties: {id: {type: string}}, required: [id]}
    http: {url: "%s/orders/{{ id }}"}
methods:
  ask:
    inputs: {q: {type: string}}
    prompt: "Answer: {{ q }}"
"""


def test_an_agent_with_an_http_tool_is_kept_and_its_tool_still_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The tool's client pool (a live connection pool per event loop) is not kept: the
    # program loaded from the cache opens its own on its first request.
    with LoopbackServer() as server:
        server.add(json_reply({"status": "shipped"}), json_reply({"status": "delivered"}))
        path = tmp_path / "shop.yaml"
        path.write_text(HTTP_AGENT % server.url)
        settle(tmp_path)
        run = [str(path), "ask", "-i", "q=where is A-1", "--json", "--live-tools"]
        assert main(run) == 0
        assert cache.load(path) is not None  # kept (before: it did not pickle)
        assert main(run) == 0
        assert [r.path for r in server.requests] == ["/orders/test", "/orders/test"]
    outputs = capsys.readouterr().out
    assert "shipped" in outputs and "delivered" in outputs


def test_a_program_not_kept_says_why_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "fresh.yaml"
    path.write_text(AGENT.replace("prompt_file: prompts/greet.j2", "prompt: hi"))
    cache.compile_cached(path)  # written just now: too recent to be kept
    assert capsys.readouterr().err == ""  # quiet unless asked
    monkeypatch.setenv("OPENPROGRAM_CACHE_DEBUG", "1")
    cache.compile_cached(path)
    assert capsys.readouterr().err == (
        "compile cache: not kept: a file it read changed while it was compiled\n"
    )


def test_a_broken_entry_is_compiled_again_and_replaced(agent: Path) -> None:
    compiled(agent)
    folder = cache.cache_folder()
    assert folder is not None
    (entry,) = folder.glob("*.pickle")
    entry.write_bytes(b"not a pickle")
    assert not compiled(agent)[1]
    assert compiled(agent)[1]


def test_a_folder_others_can_write_to_is_not_used(agent: Path) -> None:
    folder = cache.cache_folder()
    assert folder is not None
    folder.chmod(0o777)
    cache.compile_cached(agent)
    assert not any(folder.iterdir())
    assert cache.load(agent) is None


def test_the_cache_can_be_turned_off(agent: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENPROGRAM_CACHE", "off")
    assert cache.cache_folder() is None
    cache.compile_cached(agent)
    assert cache.load(agent) is None


def test_a_failed_compile_is_reported_every_time(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("version: 1\nname: bad\nmethods:\n  m:\n    prompt: '{{ nope }}'\n")
    settle(tmp_path)
    for _ in range(2):
        with pytest.raises(ConfigError, match="nope"):
            cache.compile_cached(path)


def test_runs_use_it_and_see_edits(agent: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", str(agent), "greet", "-i", "who=Ada"]) == 0
    assert "Hello, Ada!" in capsys.readouterr().out
    assert cache.load(agent) is not None
    (agent.parent / "prompts" / "greet.j2").write_text("Goodbye, {{ who }}.\n")
    assert main(["render", str(agent), "greet", "-i", "who=Ada"]) == 0
    assert "Goodbye, Ada." in capsys.readouterr().out


def test_a_fresh_process_runs_from_the_entry_another_process_wrote(agent: Path) -> None:
    code = (
        "from openprogram_yaml.runner.cli import main\n"
        f"print(main([{str(agent)!r}, 'greet', '-i', 'who=Ada']))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    runs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        for _ in range(2)
    ]
    assert cache.load(agent, environ=env) is not None
    for run in runs:  # compiled, then loaded
        assert run.stdout.splitlines()[-1] == "0", run.stderr


# A filter: text and ``{{ name }}`` alone render without Jinja, and keep no code.
JINJA_GREETING = "{{ greeting }}, {{ who | trim }}!\n"


def test_template_code_is_kept_and_checked_against_the_source(agent: Path) -> None:
    (agent.parent / "prompts" / "greet.j2").write_text(JINJA_GREETING)
    program = cache.compile_cached(agent)
    assert program.agent("greeter").method("greet").render({"who": "Ada"})[-1]["text"] == (
        "Hello, Ada!\n"
    )
    folder = cache.cache_folder()
    assert folder is not None
    (kept,) = folder.glob("templates-*")
    assert any(kept.iterdir())  # the generated code of the template
    (agent.parent / "prompts" / "greet.j2").write_text("Bye, {{ who | trim }}!\n")  # same name
    program = cache.compile_cached(agent)
    assert program.agent("greeter").method("greet").render({"who": "Ada"})[-1]["text"] == (
        "Bye, Ada!\n"
    )


def test_no_template_code_is_kept_with_the_cache_off(
    agent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (agent.parent / "prompts" / "greet.j2").write_text(JINJA_GREETING)
    folder = cache.cache_folder()
    monkeypatch.setenv("OPENPROGRAM_CACHE", "off")
    program = cache.compile_cached(agent)
    program.agent("greeter").method("greet").render({"who": "Ada"})
    assert folder is not None and not list(folder.glob("templates-*"))


def test_the_folder_stays_bounded(agent: Path) -> None:
    folder = cache.cache_folder()
    assert folder is not None
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    written = cache._ENTRIES_KEPT + 1
    for i in range(written):  # entries of other files, written long ago
        (folder / f"{i:032x}.pickle").write_bytes(b"old")
        os.utime(folder / f"{i:032x}.pickle", (i + 1, i + 1))
    stale = folder / "templates-0123456789abcdef"  # template code of another version
    stale.mkdir()
    os.utime(stale, (1, 1))
    recent = folder / "templates-fedcba9876543210"
    recent.mkdir()
    cache.compile_cached(agent)
    kept = {p.name for p in folder.glob("*.pickle")}
    assert len(kept) == cache._ENTRIES_KEPT // 2  # the least recently written went
    assert f"{written - 1:032x}.pickle" in kept and f"{0:032x}.pickle" not in kept
    assert cache.load(agent) is not None  # the new entry stays
    assert not stale.exists() and recent.exists()


def test_a_cache_folder_removed_under_a_running_process_does_not_fail_renders(
    agent: Path,
) -> None:
    folder = cache.cache_folder()
    assert folder is not None
    program = cache.compile_cached(agent)
    program.agent("greeter").method("greet").render({"who": "Ada"})
    shutil.rmtree(folder)  # a user clearing ~/.cache while a server runs
    (agent.parent / "prompts" / "greet.j2").write_text("Hi {{ who }}\n")
    program = cache.compile_cached(agent)
    assert program.agent("greeter").method("greet").render({"who": "Ada"})[-1]["text"] == (
        "Hi Ada\n"
    )


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_put_where_an_empty_file_was_is_a_change_and_never_blocks(agent: Path) -> None:
    prompt = agent.parent / "prompts" / "greet.j2"
    prompt.write_text("")
    settle(agent.parent)
    compiled(agent)
    prompt.unlink()
    os.mkfifo(prompt)  # the same size, 0, and nobody ever writes to it: reading it would block
    assert cache.load(agent) is None
