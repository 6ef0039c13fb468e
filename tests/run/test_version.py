"""The version a run names: the prompts' content hash and, in a git checkout, the commit."""

from __future__ import annotations

import subprocess
from pathlib import Path

from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.run.git_stamp import GitStamper

AGENT = """\
version: 1
name: echo
model: test
methods:
  say:
    inputs: {x: {type: string}}
    prompt_file: prompts/say.j2
"""


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


def test_version_names_the_commit_and_whether_files_differ(tmp_path: Path) -> None:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "say.j2").write_text("v {{ x }}")
    agent = tmp_path / "echo.yaml"
    agent.write_text(AGENT)
    program = compile_path(agent)
    assert GitStamper().stamp(program).to_dict() == {"hash": program.version}  # no checkout

    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "prompts")
    stamper = GitStamper()
    stamp = stamper.stamp(program)
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert (stamp.hash, stamp.commit, stamp.dirty) == (program.version, head, False)

    (tmp_path / "unrelated.txt").write_text("not a prompt")  # does not make the run dirty
    assert stamper.stamp(program).dirty is False
    (tmp_path / "prompts" / "say.j2").write_text("edited {{ x }}")
    edited = compile_path(agent)
    assert stamper.stamp(edited).dirty is True
    _git(tmp_path, "commit", "-q", "-am", "edit")
    after_commit = stamper.stamp(edited)  # same content, new commit: noticed, not cached
    assert after_commit.hash == edited.version
    assert after_commit.dirty is False and after_commit.commit != head


def test_a_checkouts_fsmonitor_command_is_not_run(tmp_path: Path) -> None:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "say.j2").write_text("v {{ x }}")
    (tmp_path / "echo.yaml").write_text(AGENT)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "prompts")
    ran = tmp_path.parent / "fsmonitor-ran"
    hook = tmp_path.parent / "fsmonitor.sh"
    hook.write_text(f"#!/bin/sh\ntouch '{ran}'\n")
    hook.chmod(0o755)
    _git(tmp_path, "config", "core.fsmonitor", str(hook))
    stamp = GitStamper().stamp(compile_path(tmp_path / "echo.yaml"))
    assert stamp.commit is not None and stamp.dirty is False
    assert not ran.exists()


def test_the_stamp_cache_keeps_the_most_recently_used_versions_only(tmp_path: Path) -> None:
    # A long-lived server stamps a new version at each edit: the cache must not grow with them.
    (tmp_path / "prompts").mkdir()
    agent = tmp_path / "echo.yaml"
    agent.write_text(AGENT)
    (tmp_path / "prompts" / "say.j2").write_text("v0 {{ x }}")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "prompts")
    stamper = GitStamper(max_stamps=3)
    first = compile_path(agent)
    stamps = {first.version: stamper.stamp(first)}
    for n in range(1, 6):
        (tmp_path / "prompts" / "say.j2").write_text(f"v{n} {{{{ x }}}}")
        program = compile_path(agent)
        stamps[program.version] = stamper.stamp(program)
        stamper.stamp(first)  # used again and again: kept
        assert len(stamper._stamps) <= 3
    assert stamper.stamp(first) == stamps[first.version]
    assert stamper.stamp(program) == stamps[program.version]
    assert {stamp.dirty for stamp in stamps.values()} == {False, True}
