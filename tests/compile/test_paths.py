"""Project patterns: listing one folder gives what globbing it gives."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest

from openprogram_yaml.compile.paths import glob_file_names


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
