"""Project patterns: listing one folder gives what globbing it gives; paths as users see them."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest

from openprogram_yaml.compile.paths import display_path, glob_file_names, resolve_inside


@pytest.mark.parametrize("pattern", ["agents/*.yaml", "agents/.*.yaml", "agents/a?.yaml", "*"])
def test_a_pattern_of_one_folder_matches_what_glob_matches(tmp_path: Path, pattern: str) -> None:
    agents = tmp_path / "agents"
    (agents / "sub.yaml").mkdir(parents=True)  # a folder is not a file
    for name in ("a1.yaml", "b.yaml", ".hidden.yaml", "notes.txt"):
        (agents / name).write_text("x")
    (tmp_path / "elsewhere.yaml").write_text("x")
    (agents / "linked.yaml").symlink_to(tmp_path / "elsewhere.yaml")
    (agents / "dangling.yaml").symlink_to(tmp_path / "missing.yaml")
    expected = sorted(
        os.path.realpath(found)
        for found in glob.glob(os.path.join(tmp_path, pattern))
        if os.path.isfile(found)
    )
    assert glob_file_names(tmp_path, pattern) == expected


def test_a_path_is_shown_relative_to_the_working_directory_only_when_inside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    cases = {
        work / "agents" / "a.yaml": Path("agents/a.yaml"),
        work: Path("."),
        tmp_path / "workshop" / "a.yaml": tmp_path / "workshop" / "a.yaml",  # a prefix, no parent
        tmp_path / "a.yaml": tmp_path / "a.yaml",
        Path("agents/a.yaml"): Path("agents/a.yaml"),
    }
    for path, shown in cases.items():
        assert display_path(path) == shown, path


def test_a_reference_is_inside_the_root_only_below_it_not_beside_it(tmp_path: Path) -> None:
    root = tmp_path.resolve() / "proj"  # resolve_inside compares real paths
    (root / "templates").mkdir(parents=True)
    (tmp_path / "project").mkdir()  # shares the root's name as a prefix
    agent = root / "agent.yaml"
    assert resolve_inside(agent, "templates/a.md", root) == (root / "templates" / "a.md", None)
    assert resolve_inside(agent, "templates/..", root) == (root, None)
    for outside in ("../project/a.md", "../a.md"):
        target, problem = resolve_inside(agent, outside, root)
        assert target is None and problem is not None and "leaves the project root" in problem
