"""Paths named in config: relative to the file that names them, never outside the project."""

from __future__ import annotations

import fnmatch
import glob
import os
import stat
from pathlib import Path

__all__ = [
    "LINK",
    "PROJECT_FILE",
    "Lookup",
    "Resolutions",
    "display_path",
    "entry_kind",
    "find_project_root",
    "glob_file_names",
    "glob_problem",
    "link_kind",
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
    resolved = os.path.realpath(os.path.join(base_file.parent, relative))
    # As strings, as in display_path: realpath's result and a Path's str are normalised.
    inside = str(root)
    if resolved != inside and not resolved.startswith(inside.rstrip(os.sep) + os.sep):
        return None, f"'{relative}' leaves the project root {root}; keep files inside it"
    return Path(resolved), None


#: The kind a lookup records for a path that resolved through a symbolic link: this prefix
#: and where it led (``link_kind``). A link retargeted reads differently, as a file appearing
#: where nothing was does; its target's stamp alone would not tell.
LINK = "link:"


def link_kind(path: str) -> str:
    """What a lookup of a path resolved through a link finds now (``LINK``)."""
    return LINK + os.path.realpath(path)


class Resolutions:
    """``resolve_inside`` remembered for one compile.

    The agents of a repository name the same few files from the same few folders, and each
    resolution costs an lstat per part of the path. Kept for one compile only (a link
    changed later is seen by the next), and only for paths that resolved inside: a problem's
    message names the file that named the path.
    """

    def __init__(self) -> None:
        self._found: dict[tuple[str, str, str], tuple[Path, str | None]] = {}

    def resolve_inside(
        self, base_file: Path, relative: str, root: Path, lookups: dict[str, str] | None = None
    ) -> tuple[Path | None, str | None]:
        """``resolve_inside(base_file, relative, root)``; a path that resolved through a
        symbolic link is recorded in ``lookups`` with where it led (``LINK``)."""
        key = (os.path.dirname(base_file), relative, str(root))
        found = self._found.get(key)
        if found is None:
            target, problem = resolve_inside(base_file, relative, root)
            if target is None:
                return None, problem
            named = os.path.join(key[0], relative)
            linked = named if os.path.normpath(named) != str(target) else None
            found = self._found[key] = (target, linked)
        if found[1] is not None and lookups is not None:
            lookups[found[1]] = LINK + str(found[0])
        return found[0], None


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
    # Compared as strings: a check names thousands of files, and a Path for the working
    # directory plus ``relative_to`` cost more than the rest of this. Both strings are
    # normalised (a Path's str, getcwd), so a prefix ending at a separator is a parent.
    text, cwd = str(path), os.getcwd()
    if text == cwd:
        return Path(".")
    prefix = cwd if cwd.endswith(os.sep) else cwd + os.sep
    return Path(text[len(prefix) :]) if text.startswith(prefix) else path


def glob_file_names(root: Path | str, pattern: str) -> list[str]:
    """The files under ``root`` matching ``pattern``, symlinks resolved, in a stable order.

    Strings, not paths: a reload globs the repository each time, and a path object costs
    more than the lookup that found it. Each folder is resolved once (a repository holds
    many files in few folders); a file is resolved on its own only when it is a link. A
    pattern whose only wildcards are in its last part (``agents/*.yaml``) lists that one
    folder, with no call per file.
    """
    folder_part, _, name_part = pattern.rpartition("/")
    if glob.has_magic(folder_part) or "**" in name_part or not glob.has_magic(name_part):
        return _real_files(_walked(str(root), pattern.split("/")))
    folder = os.path.join(str(root), folder_part) if folder_part else str(root)
    try:
        with os.scandir(folder) as listing:
            entries = [(e.name, e.is_symlink(), e.is_file(follow_symlinks=False)) for e in listing]
    except OSError:
        return []
    # As glob: a wildcard does not match a leading dot unless the pattern starts with one.
    hidden = name_part.startswith(".")
    names = set(fnmatch.filter([n for n, _, _ in entries if hidden or n[0] != "."], name_part))
    out: list[str] = []
    real_folder = os.path.realpath(folder)
    for name, link, regular in entries:
        if name not in names:
            continue
        if link:
            real = os.path.realpath(os.path.join(folder, name))
            if os.path.isfile(real):
                out.append(real)
        elif regular:
            out.append(os.path.join(real_folder, name))
    return sorted(out)


def _walked(root: str, parts: list[str]) -> list[str]:
    """What ``glob.glob(root/pattern, recursive=True)`` finds (``parts``: the pattern split
    at "/"), but each real folder is entered once for each part of the pattern.

    Glob follows folder links, and enters a folder again each time a path reaches it: two
    links to ``..`` made it walk 2**depth paths, until names grew too long (a cloned
    repository keeps its links). What it finds in a folder depends only on the folder and
    the rest of the pattern, and the caller keeps real paths: entering once finds the same
    files. As glob: wildcards do not match names starting with "." unless the part does,
    ``**`` matches no folder or any number of them (and files too, last), a part without
    wildcards is looked up as it is.
    """
    found: list[str] = []
    seen: set[tuple[int, int, int]] = set()
    pending = [(root, 0)]
    while pending:
        folder, i = pending.pop()
        try:
            st = os.stat(folder)
        except (OSError, ValueError):
            continue
        key = (st.st_dev, st.st_ino, i)
        if key in seen:
            continue
        seen.add(key)
        part, last = parts[i], i == len(parts) - 1
        if not glob.has_magic(part):
            path = os.path.join(folder, part)
            if last:
                found.append(path)  # kept if it is a file (``_real_files``)
            else:
                pending.append((path, i + 1))
            continue
        try:
            with os.scandir(folder) as listing:
                entries = [(e.name, _is_folder(e)) for e in listing]
        except OSError:
            continue
        if part == "**":
            if not last:
                pending.append((folder, i + 1))  # no folder
            for name, is_folder in entries:
                if name.startswith("."):
                    continue
                path = os.path.join(folder, name)
                if is_folder:
                    pending.append((path, i))
                if last:
                    found.append(path)
            continue
        hidden = part.startswith(".")
        names = set(fnmatch.filter([n for n, _ in entries if hidden or n[0] != "."], part))
        for name, is_folder in entries:
            if name in names:
                path = os.path.join(folder, name)
                if last:
                    found.append(path)
                elif is_folder:
                    pending.append((path, i + 1))
    return found


def _is_folder(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()  # links followed, as glob does
    except OSError:
        return False


def _real_files(found: list[str]) -> list[str]:
    folders: dict[str, str] = {}
    out: list[str] = []
    for path in found:
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue
        if stat.S_ISLNK(mode):
            real = os.path.realpath(path)
            if os.path.isfile(real):
                out.append(real)
            continue
        if not stat.S_ISREG(mode):
            continue
        folder, name = os.path.split(path)
        real_folder = folders.get(folder)
        if real_folder is None:
            real_folder = folders[folder] = os.path.realpath(folder)
        out.append(os.path.join(real_folder, name))
    return sorted(out)
