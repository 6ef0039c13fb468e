"""README "Reviewing a prompt change", made real: the example repository in a git
repository of its own, a prompt change re-recorded (the judge's reply from a scripted judge
on 127.0.0.1 standing in for gpt-4o-mini), then ``diff HEAD~1 HEAD . --test`` on the two
commits. The output the README shows is what this prints (hashes aside)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from loopback import LoopbackServer, chat_completion, json_reply
from support import EXAMPLES, GIT_ENV, REPO

from openprogram_yaml.runner.cli import main

#: Commit ids and prompt versions differ with the example's contents; the rest may not.
HASH = re.compile(r"\b[0-9a-f]{7,12}\b")


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, env={**os.environ, **GIT_ENV}
    )


def readme_block(command: str) -> str:
    """The output the README shows after ``$ command`` in "Reviewing a prompt change"."""
    section = (REPO / "README.md").read_text().split("## Reviewing a prompt change")[1]
    section = section.split("\n## ")[0]
    start = section.rindex(f"$ {command}\n") + len(f"$ {command}\n")
    return section[start : section.index("```", start)]


def same(shown: str, printed: str) -> None:
    assert HASH.sub("#", shown).rstrip() == HASH.sub("#", printed).rstrip()


def test_the_readme_walkthrough(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "support-prompts"
    shutil.copytree(EXAMPLES / "support_repo", repo)
    project = repo / "openprogram.yaml"
    project.write_text(project.read_text() + "recordings: recordings\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "prompts v1")
    monkeypatch.chdir(repo)

    draft = repo / "agents" / "replies.yaml"
    draft.write_text(draft.read_text().replace("Draft a {{ tone }}", "Draft a short {{ tone }}"))
    assert main(["diff", "."]) == 0  # before committing: HEAD against the work tree
    assert "replies.draft: changed" in capsys.readouterr().out
    monkeypatch.setenv("OPENAI_API_KEY", "sk-walkthrough-key")
    with LoopbackServer() as judge:
        monkeypatch.setenv("OPENAI_BASE_URL", judge.url + "/v1")
        verdict = {"score": 0.95, "reason": "Short, answers first, signed as asked."}
        judge.add(json_reply(chat_completion(json.dumps(verdict))))
        assert main(["test", ".", "--record", "recordings"]) == 1  # the formal tone case
        assert judge.pending == 0
    assert main(["lock", "."]) == 0
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "shorter replies")
    capsys.readouterr()

    assert main(["diff", "HEAD~1", "HEAD", ".", "--test"]) == 1  # a case got worse
    printed = capsys.readouterr().out
    same(readme_block("openprogram-run diff HEAD~1 HEAD . --test"), printed)
