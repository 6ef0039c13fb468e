"""``openprogram-run diff [REV_A] [REV_B] PATH``: two versions of a prompt repository kept in
a real git repository made by the test (the example support_repo), compared without
touching the user's files, index or worktrees."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support import EXAMPLES, GIT_ENV

from openprogram_yaml.runner.cli import main

DRAFT = "support_repo/agents/replies.yaml"
SECRET = "sk-diff-secret-4412"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_ENV},
    ).stdout


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SUPPORT_API_TOKEN", SECRET)  # a secret by its variable's name
    root = tmp_path / "prompts"
    root.mkdir()
    shutil.copytree(EXAMPLES / "support_repo", root / "support_repo")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "prompts v1")
    return root


def snapshot(repo: Path) -> dict[str, str]:
    """Every file of the checkout (and git's index, HEAD, refs, worktrees) by content."""
    files: dict[str, str] = {}
    for path in sorted(repo.rglob("*")):
        relative = path.relative_to(repo).as_posix()
        if path.is_file() and not relative.startswith(".git/objects/"):
            files[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
        elif path.is_dir():
            files[relative] = "folder"
    files["worktrees"] = git(repo, "worktree", "list", "--porcelain")
    return files


def run_diff(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["diff", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_head_against_the_work_tree_by_default_with_uncommitted_and_untracked_files(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit(repo / DRAFT, "Draft a {{ tone }} reply.", "Draft a short {{ tone }} reply.")
    (repo / "support_repo/tests/new.tests.yaml").write_text(
        "version: 1\nagent: replies\ntests:\n"
        "  - name: an untracked case\n    method: draft\n"
        f"    inputs: {{ticket: 'my token is {SECRET}'}}\n"
        "    expect: {contains: [Acme Mail]}\n"
    )
    before = snapshot(repo)
    code, out, _ = run_diff(capsys, str(repo / "support_repo"), "--test", "--json")
    assert snapshot(repo) == before  # files, index, HEAD, refs, worktrees: untouched
    assert SECRET not in out
    data = json.loads(out)
    assert (data["before"], data["after"]) == (
        f"HEAD ({git(repo, 'rev-parse', 'HEAD')[:7]})",
        "work tree",
    )
    (draft,) = data["methods"]
    assert draft["method"] == "replies.draft" and draft["status"] == "changed"
    renders = {r["case"]: r["diff"] for r in draft["renders"]}
    changed = renders["test: replies are signed in the house style"]
    assert any(line.startswith("-Draft a friendly reply.") for line in changed)
    assert any(line.startswith("+Draft a short friendly reply.") for line in changed)
    assert any("my token is ***" in line for line in renders["test: an untracked case"])
    assert data["lock_problems"] == [
        f"replies.draft: prompt changed ({draft['before']} -> {draft['after']})"
    ]
    cases = {c["case"]: c for c in data["tests"]["cases"]}
    formal = cases["replies: the formal tone reaches the prompt"]
    assert formal["change"] == "worse"
    assert formal["after"]["problem"] == "expected output to match /Draft a formal reply/"
    assert cases["replies: an untracked case"]["change"] == "new"
    assert data["tests"]["summary"]["worse"] == 1
    assert code == 1  # a case got worse


def test_two_commits_show_which_cases_got_better_as_markdown(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tests = repo / "support_repo/tests/replies.tests.yaml"
    edit(tests, 'regex: "Draft a formal reply"', 'regex: "Draft a brief, formal reply"')
    edit(tests, "- name: the formal tone", "- name: the <img src=x> | `formal` tone")
    git(repo, "commit", "-q", "-am", "a case that fails")
    edit(repo / DRAFT, "Draft a {{ tone }} reply.", "Draft a brief, {{ tone }} reply. ````")
    git(repo, "commit", "-q", "-am", "briefer replies")
    before = snapshot(repo)
    code, out, _ = run_diff(
        capsys, "HEAD~1", "HEAD", str(repo / "support_repo"), "--test", "--format", "markdown"
    )
    assert snapshot(repo) == before
    assert code == 0
    old, new = (
        git(repo, "rev-parse", "--short=7", "HEAD~1").strip(),
        git(repo, "rev-parse", "--short=7", "HEAD").strip(),
    )
    assert out.startswith(
        f"### Prompt changes in support\\_repo: HEAD\\~1 ({old}) → HEAD ({new})\n"
    )
    assert "| replies.draft | changed |" in out
    assert "`````diff\n" in out  # longer than the four backticks in the prompt
    assert "+Draft a brief, friendly reply. ````" in out
    assert "#### tests: 1 better, 3 unchanged" in out
    name = "replies: the \\<img src=x\\> \\| \\`formal\\` tone reaches the prompt"
    assert f"| {name} | ❌ FAIL | ✅ pass | 🟢 better |" in out
    assert "<summary>replies.draft: test: the &lt;img src=x&gt; | `formal` tone" in out
    assert re.search(r"(?<!\\)<img", out) is None  # the test's name never becomes a tag


def test_a_version_that_does_not_compile_is_reported_and_the_others_compared(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit(repo / DRAFT, "Draft a {{ tone }} reply.", "Draft a {{ tonne }} reply.")
    code, out, _ = run_diff(capsys, str(repo / "support_repo"))
    assert code == 1
    assert "work tree does not compile:" in out
    assert "support_repo/agents/replies.yaml:" in out and "tonne" in out
    assert "/tmp" not in out.split("does not compile:")[1].splitlines()[1]


def test_the_repository_hooks_do_not_run(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edit(repo / DRAFT, "Draft a {{ tone }} reply.", "Draft a short {{ tone }} reply.")
    git(repo, "commit", "-q", "-am", "shorter")
    hook = repo / ".git/hooks/post-checkout"
    ran = repo.parent / "hook-ran"
    hook.write_text(f"#!/bin/sh\ntouch {ran}\n")
    hook.chmod(0o755)
    code, out, _ = run_diff(capsys, "HEAD~1", "HEAD", str(repo / "support_repo"))
    assert code == 0 and "replies.draft: changed" in out
    assert not ran.exists()
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope", "{repo}/support_repo"], "unknown revision 'nope'"),
        (["--", "-x", "{repo}/support_repo"], "unknown revision '-x'"),
        (["{outside}"], "is not in a git repository"),
        (["a", "b", "c", "{repo}"], "at most two revisions and a PATH"),
    ],
)
def test_usage_errors_exit_2_with_what_to_do(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    outside = tmp_path / "outside"
    shutil.copytree(EXAMPLES / "support_repo", outside)
    filled = [a.format(repo=repo, outside=outside) for a in args]
    code, out, err = run_diff(capsys, *filled)
    assert code == 2 and out == ""
    assert message in err and "Traceback" not in err


def test_a_method_without_tests_is_rendered_with_placeholders_given_an_agent_file(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    desk = repo / "support_repo/agents/desk.yaml"
    edit(desk, "Write the final answer to the customer.", "Answer the customer kindly.")
    code, out, _ = run_diff(capsys, str(desk))  # the project file is above the agent file
    assert code == 0
    assert "desk.answer: changed" in out
    assert "── desk.answer, placeholder inputs ──" in out
    assert "<ticket>" in out
    assert "-Write the final answer to the customer." in out
    assert "+Answer the customer kindly." in out


def test_a_fix_of_a_version_that_did_not_compile_is_not_a_failure(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit(repo / DRAFT, "Draft a {{ tone }} reply.", "Draft a {{ tonne }} reply.")
    git(repo, "commit", "-q", "-am", "broken")
    edit(repo / DRAFT, "Draft a {{ tonne }} reply.", "Draft a {{ tone }} reply.")
    code, out, _ = run_diff(capsys, str(repo / "support_repo"), "--test")
    assert code == 0
    assert out.count("does not compile:") == 1 and "HEAD (" in out.split("does not compile")[0]
    assert re.search(r"^tests: \d+ new$", out, re.MULTILINE)  # the old version had none


def test_the_text_diff_shows_a_prompts_escape_sequences_as_text(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The prompts under review are someone else's edit: an "erase line" sequence in one must
    # not hide, on the reviewer's terminal, the very line it is on.
    ticket = repo / "support_repo/prompts/_ticket.j2"
    ticket.write_text(ticket.read_text() + "Refund at once.\x1b[2K\n")
    _, out, _ = run_diff(capsys, str(repo / "support_repo"))
    assert "\x1b" not in out, out
    assert r"+Refund at once.\x1b[2K" in out, out


def test_a_file_named_in_no_utf_8_is_copied_with_the_work_tree(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # git names files as the file system holds them (ls-files -z): read as UTF-8 text, a
    # Latin-1 name in someone's repository stopped diff with a UnicodeDecodeError.
    (repo / "support_repo" / os.fsdecode(b"caf\xe9.txt")).write_text("notes")
    code, out, err = run_diff(capsys, str(repo / "support_repo"))
    assert (code, err) == (0, ""), err
    assert "work tree" in out
