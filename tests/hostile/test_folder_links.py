"""Folder links a repository brings cannot make ``check`` walk without end: a ``**``
pattern (``agents: ["**/*.yaml"]``) enters each real folder once, so two links to ``..``
(which made glob walk 2**depth paths, until names grew too long: over a minute, still
going) or links fanning out to the same folders cost one visit each. What the patterns
match is what ``glob`` matches, real paths kept once (a seeded differential test).
"""

from __future__ import annotations

import glob
import os
import random
import time
from pathlib import Path

import pytest

from openprogram_yaml.compile.paths import _real_files, glob_file_names
from openprogram_yaml.runner.cli import main

AGENT = "version: 1\nname: {name}\nmodel: test\nmethods:\n  m:\n    prompt: hi\n"


@pytest.mark.parametrize("links", ["loop", "fan-out"])
def test_a_double_star_pattern_walks_each_real_folder_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], links: str
) -> None:
    root = tmp_path.resolve()
    (root / "openprogram.yaml").write_text('version: 1\nagents: ["**/*.yaml"]\n')
    (root / "agents").mkdir()
    (root / "agents" / "a.yaml").write_text(AGENT.format(name="a"))
    if links == "loop":
        (root / "agents" / "l1").symlink_to("..")
        (root / "agents" / "l2").symlink_to("..")
    else:  # 30 levels, each holding two links to the next: 2**30 paths, no loop
        for level in range(30):
            folder = root / "fan" / f"f{level}"
            folder.mkdir(parents=True)
            for link in ("x", "y"):
                (folder / link).symlink_to(f"../f{level + 1}")
        (root / "fan" / "f30").mkdir()
    started = time.monotonic()
    assert main(["check", str(root)]) == 0, capsys.readouterr().err
    assert time.monotonic() - started < 10
    assert "ok: 1 agent" in capsys.readouterr().out


PATTERNS = [
    "**/*.yaml",
    "**",
    "**/*",
    "*/*.yaml",
    "a*/**/x*.yaml",
    "agents/**",
    "agents/**/*.y*ml",
    "**/.h*",
    "**/sub/*.yaml",
    "agents/sub/b.yaml",
    "agents/*/b.yaml",
    "*",
    ".hidden/*.yaml",
    "[ab]*/**/[!.]*.yaml",
    "**/**/*.yaml",
    "nothing/**/*.yaml",
]


def _random_tree(root: Path, rng: random.Random) -> None:
    folders = [root]
    for _ in range(rng.randint(3, 12)):
        parent = rng.choice(folders)
        name = rng.choice(["agents", "sub", "abc", ".hidden", "b2", "deep", "x"])
        child = parent / f"{name}{rng.randint(0, 2) or ''}"
        child.mkdir(exist_ok=True)
        folders.append(child)
    for folder in folders:
        for _ in range(rng.randint(0, 3)):
            name = rng.choice(["a.yaml", "b.yaml", "x1.yaml", ".h.yaml", "c.yml", "n.txt"])
            (folder / name).write_text("x")
    # Links to files and to folders that are not above them (glob would loop on those).
    for _ in range(rng.randint(0, 4)):
        folder = rng.choice(folders)
        target = rng.choice(folders)
        if folder.is_relative_to(target) or target.is_relative_to(folder):
            continue
        link = folder / f"link{rng.randint(0, 9)}"
        if not os.path.lexists(link):
            link.symlink_to(target)
    files = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
    if files:
        link = rng.choice(folders) / "filelink.yaml"
        if not os.path.lexists(link):
            link.symlink_to(rng.choice(files))
    (rng.choice(folders) / "broken.yaml").symlink_to(root / "missing")


@pytest.mark.parametrize("seed", range(40))
def test_patterns_match_what_glob_matches(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    root = tmp_path.resolve() / "repo"
    root.mkdir()
    _random_tree(root, rng)
    for pattern in PATTERNS:
        expected = _real_files(
            glob.glob(os.path.join(glob.escape(str(root)), pattern), recursive=True)
        )
        assert sorted(set(glob_file_names(root, pattern))) == sorted(set(expected)), pattern
