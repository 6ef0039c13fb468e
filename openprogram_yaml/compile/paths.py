"""Paths named in config: relative to the file that names them, never outside the project."""

from __future__ import annotations

import glob
import os
import stat
from pathlib import Path

__all__ = [
    "PROJECT_FILE",
    "Lookup",
    "display_path",
    "entry_kind",
    "find_project_root",
    "glob_files",
    "glob_problem",
    "project_root_lookups",
    "resolve_inside",
]

#: The file that marks the root of a prompt repository.
PROJECT_FILE = "openprogram.yaml"


def find_project_root(start: Path) -> Path:
    """The project an agent file belongs to.

    The nearest folder holding ``openprogram.yaml``; else the root of the git checkout it is
    in; else the file's own folder.
    """
    return project_root_lookups(start)[0]


def entry_kind(path: Path | str) -> str:
    """What is at ``path``, links followed: ``"file"``, ``"folder"``, ``"other"``, or ``""``
    for nothing. A lookup records it so that a later one can tell whether it would find
    the same (a file where nothing was, a folder where a file was)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # ValueError: a NUL in the name
        return ""
    if stat.S_ISREG(mode):
        return "file"
    return "folder" if stat.S_ISDIR(mode) else "other"


#: A path looked at, and what was there (``entry_kind``: "" for nothing).
Lookup = tuple[Path, str]


def project_root_lookups(start: Path) -> tuple[Path, tuple[Lookup, ...]]:
    """``find_project_root(start)``, and every path it looked at with what it found: a
    project file or a checkout appearing later where nothing was changes the project."""
    start = start.resolve()
    folder = start if start.is_dir() else start.parent
    lookups: list[Lookup] = []
    for candidate in (folder, *folder.parents):
        lookups.append((candidate / PROJECT_FILE, entry_kind(candidate / PROJECT_FILE)))
        if lookups[-1][1] == "file":
            return candidate, tuple(lookups)
    for candidate in (folder, *folder.parents):
        lookups.append((candidate / ".git", entry_kind(candidate / ".git")))
        if lookups[-1][1]:
            return candidate, tuple(lookups)
    return folder, tuple(lookups)


def resolve_inside(base_file: Path, relative: str, root: Path) -> tuple[Path | None, str | None]:
    """``(path, None)`` for a path inside ``root``, else ``(None, problem)``.

    Symlinks are resolved before the check, so a link cannot smuggle a path out.
    """
    if relative.startswith(("http://", "https://", "file://")) or "://" in relative:
        return None, f"'{relative}' is a URL; only files inside the project can be referenced"
    if os.path.isabs(relative):
        return None, f"'{relative}' is absolute; write it relative to {base_file.name}"
    resolved = Path(os.path.realpath(os.path.join(base_file.parent, relative)))
    if not resolved.is_relative_to(root):
        return None, f"'{relative}' leaves the project root {root}; keep files inside it"
    return resolved, None


def glob_problem(pattern: str, base_file: Path) -> str | None:
    """Why ``pattern`` may not be globbed under the project, or None.

    Checked before globbing: ``/**/*.yaml`` would walk the whole machine.
    """
    if os.path.isabs(pattern) or pattern.startswith("~"):
        return f"'{pattern}' is absolute; write the pattern relative to {base_file.name}"
    if ".." in pattern.replace("\\", "/").split("/"):
        return f"'{pattern}' leaves the project with '..'; match only files inside it"
    return None


def display_path(path: Path) -> Path:
    """A path as users see it: relative to the working directory when it is inside it."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def glob_files(root: Path, pattern: str) -> list[Path]:
    """The files under ``root`` matching ``pattern``, symlinks resolved, in a stable order.

    Each folder is resolved once (a repository holds many files in few folders), and each
    match costs one ``lstat``; a file is resolved on its own only when it is a link.
    """
    folders: dict[str, str] = {}
    out: list[str] = []
    for found in glob.glob(os.path.join(glob.escape(str(root)), pattern), recursive=True):
        try:
            mode = os.lstat(found).st_mode
        except OSError:
            continue
        if stat.S_ISLNK(mode):
            real = os.path.realpath(found)
            if os.path.isfile(real):
                out.append(real)
            continue
        if not stat.S_ISREG(mode):
            continue
        folder, name = os.path.split(found)
        real_folder = folders.get(folder)
        if real_folder is None:
            real_folder = folders[folder] = os.path.realpath(folder)
        out.append(os.path.join(real_folder, name))
    return [Path(p) for p in sorted(out)]
