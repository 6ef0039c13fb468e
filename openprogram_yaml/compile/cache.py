"""The compile cache: compiled programs kept on disk, so that running unchanged files does
not compile them again.

A one-shot ``openprogram-run`` spends most of its own time compiling: reading YAML with
positions, validating it, checking templates and schemas. When nothing that compile read has
changed, the program it built is loaded instead, and neither YAML nor pydantic is imported.
Before an entry is used, everything the compile read is checked:

- every file of ``Program.files`` (agents, the project file, templates, schemas, python tool
  modules, test files): its size and modification time, or, when those moved, the sha256
  of its contents;
- the listing of the template and schema folders and of the folder of every file read,
  since a new file there may shadow another;
- the files each of the project's patterns (``agents:``, ``tests:``) matches;
- what the search for the project found in each folder it looked in (``openprogram.yaml``
  and ``.git`` in the agent file's folder and its parents), nothing included: a project
  file appearing later in a parent folder makes the agent part of that project;
- the value of every environment variable the files name (kept as a hash);
- this package's own code, the Python version, the working directory (messages show paths
  relative to it), and ``PATH`` and ``PYTHONPATH`` (command and python tools are found
  through them).

A file that changed while it was being compiled (modified less than ``stamps.RACY_NS``
before the compile began, or after) is not trusted, and the program is not kept.

Where: ``$OPENPROGRAM_CACHE_DIR``, else ``$XDG_CACHE_HOME/openprogram-yaml``, else
``~/.cache/openprogram-yaml``. ``OPENPROGRAM_CACHE=off`` turns the cache off. A program that
holds a secret (a key or header value from the environment) is never written.

Entries are pickles, and Jinja's template code holds a pickle too: loading one runs code,
so the folder must be one nobody else could have planted a file in. A folder that is
given as a relative path, lies inside the project being run, is a symbolic link, belongs to
another user or can be written by others is not used (one warning line says why), and an
entry is read only when it is a regular file, not a link, of this user, and writable by
no one else. Files are opened without following links, through the checked folder.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pickle
import shutil
import stat
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from .. import __version__
from .._file_writes import write_atomically
from .paths import find_project_root, glob_files
from .program import Program
from .stamps import RACY_NS, entry_kind
from .stamps import digest as file_digest

if TYPE_CHECKING:
    from jinja2 import BytecodeCache

__all__ = ["cache_folder", "compile_cached", "load", "store", "template_code_cache"]

#: Bumped whenever what an entry holds changes shape.
_FORMAT = 3
#: Entries kept; beyond this, the least recently written half is removed.
_ENTRIES_KEPT = 256


def cache_folder(environ: Mapping[str, str] | None = None) -> Path | None:
    """Where entries are kept, or None when the cache is turned off."""
    env = os.environ if environ is None else environ
    if env.get("OPENPROGRAM_CACHE", "").strip().lower() in ("off", "0", "no", "false"):
        return None
    chosen = env.get("OPENPROGRAM_CACHE_DIR")
    if chosen:
        return Path(chosen)
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "openprogram-yaml"


def compile_cached(path: Path, *, environ: Mapping[str, str] | None = None) -> Program:
    """``compile_path(path)``, or the program it gave last time when nothing it read has
    changed since. Raises ``ConfigError`` as ``compile_path`` does (failed compiles are not
    kept: their problems are reported anew each time)."""
    program = load(path, environ=environ)
    if program is not None:
        return program
    from .project import compile_path

    started = time.time_ns()
    program = compile_path(path, environ=environ)
    store(path, program, started_ns=started, environ=environ)
    return program


def load(path: Path, *, environ: Mapping[str, str] | None = None) -> Program | None:
    """The kept program compiled from ``path``, if it is still what compiling would give."""
    folder = _usable_folder(environ, create=False, project=find_project_root(path))
    if folder is None:
        return None
    env = os.environ if environ is None else environ
    key = _key(path, env)
    try:
        opened = _open_private(folder, f"{key}.pickle")
        if opened is None:
            return None
        with opened as stream:
            manifest = pickle.load(stream)
            if not _still_valid(manifest, key, env):
                return None
            program = pickle.load(stream)
    except Exception:  # missing, unreadable, or written by other code: compile instead
        return None
    return program if isinstance(program, Program) else None


def store(
    path: Path,
    program: Program,
    *,
    started_ns: int,
    environ: Mapping[str, str] | None = None,
) -> bool:
    """Keep ``program`` (compiled from ``path``, starting at ``started_ns``) for later runs.

    Returns whether it was kept. Programs holding secrets, and programs whose files changed
    while they were compiled, are not; nor is anything kept when the folder cannot be.
    """
    if any(agent.secrets for agent in program.agents.values()):
        return False
    env = os.environ if environ is None else environ
    manifest = _manifest(program, _key(path, env), env, started_ns)
    if manifest is None:
        return False
    folder = _usable_folder(environ, create=True, project=program.root)
    if folder is None:
        return False
    try:
        # ``load`` reads the manifest, then the program, from the one file.
        data = pickle.dumps(manifest, pickle.HIGHEST_PROTOCOL)
        data += pickle.dumps(program, pickle.HIGHEST_PROTOCOL)
        # Not synced: an entry lost in a crash costs one compile, and a torn one fails to load.
        write_atomically(folder / f"{manifest['key']}.pickle", data, sync=False, mode=0o600)
    except Exception:  # a full disk, or a program that does not pickle: it runs uncached
        return False
    _prune(folder)
    return True


def template_code_cache(
    near: Path, environ: Mapping[str, str] | None = None
) -> BytecodeCache | None:
    """Where Jinja keeps the Python code it generates for templates, checked against each
    template's source (Jinja's own ``FileSystemBytecodeCache``), in a folder of the cache
    that this package's code and the Jinja and Python versions name. None when the cache
    is off or its folder cannot be used (``near``, a file of the template's project, tells
    which project it must not lie in)."""
    folder = _usable_folder(environ, create=True, project=find_project_root(near))
    if folder is None:
        return None
    return _template_code_cache(str(folder / _template_folder_name()))


def _template_folder_name() -> str:
    import jinja2

    tag = f"{_code_fingerprint()}:{jinja2.__version__}:{sys.version}"
    return "templates-" + hashlib.sha256(tag.encode()).hexdigest()[:16]


@functools.cache
def _template_code_cache(folder: str) -> BytecodeCache:
    from jinja2 import FileSystemBytecodeCache

    class KeptTemplateCode(FileSystemBytecodeCache):
        """Jinja's cache, except that an entry it cannot write (the folder removed while a
        server runs, a full disk) is skipped: a cache must never fail a render; and that
        an entry is read only as the compile cache reads its own (Jinja unpickles part of
        it)."""

        def load_bytecode(self, bucket: Any) -> None:
            name = os.path.basename(self._get_cache_filename(bucket))
            opened = _open_private(Path(self.directory), name)
            if opened is not None:
                with opened:
                    bucket.load_bytecode(opened)

        def dump_bytecode(self, bucket: Any) -> None:
            with contextlib.suppress(OSError):
                os.makedirs(self.directory, 0o700, exist_ok=True)
                super().dump_bytecode(bucket)

    return KeptTemplateCode(folder)


# --- keys and manifests ------------------------------------------------------------------


def _key(path: Path, env: Mapping[str, str]) -> str:
    parts = (
        str(_FORMAT),
        sys.version,
        _code_fingerprint(),
        os.path.realpath(path),
        os.getcwd(),
        env.get("PATH", ""),
        env.get("PYTHONPATH", ""),
    )
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


_fingerprint: list[str] = []


def _code_fingerprint() -> str:
    """This package's version and the size and time of every module file: an edit to the
    code (an upgrade, or a change in a development checkout) makes every entry stale."""
    if not _fingerprint:
        digest = hashlib.sha256(__version__.encode())
        package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        for folder, subfolders, names in os.walk(package):
            subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
            for name in sorted(names):
                if name.endswith(".py"):
                    st = os.stat(os.path.join(folder, name))
                    digest.update(f"{folder}/{name}:{st.st_mtime_ns}:{st.st_size}\0".encode())
        _fingerprint.append(digest.hexdigest())
    return _fingerprint[0]


def _manifest(
    program: Program, key: str, env: Mapping[str, str], started_ns: int
) -> dict[str, Any] | None:
    """Plain data naming everything the compile read, or None when something changed while
    it was compiled (or cannot be read), so the program must not be kept."""
    settled = started_ns - RACY_NS
    lookups = program.inputs.lookups
    if not _same_lookups((str(path), kind) for path, kind in lookups):
        return None  # a project file appeared (or went) while compiling
    try:
        files = [_settled(str(f), settled, file_digest) for f in sorted(program.files, key=str)]
        looked_in = {*map(str, program.inputs.folders), *(os.path.dirname(f[0]) for f in files)}
        folders = [_settled(folder, settled, _listing_digest) for folder in sorted(looked_in)]
    except _Unsettled:
        return None
    return {
        "format": _FORMAT,
        "key": key,
        "root": str(program.root),
        "files": files,
        "folders": folders,
        "env": [(name, _env_digest(env.get(name))) for name in sorted(program.inputs.env_names)],
        "globs": [
            (pattern, [str(m) for m in matched]) for pattern, matched in program.inputs.globs
        ],
        "lookups": [(str(path), kind) for path, kind in lookups],
    }


class _Unsettled(Exception):
    """A file or folder changed while it was compiled, or cannot be read."""


def _settled(
    path: str, settled_ns: int, contents: Callable[[str], bytes]
) -> tuple[str, tuple[int, int], bytes]:
    """``(path, (mtime_ns, size), digest of contents)``, for a path unchanged since
    ``settled_ns``."""
    try:
        st = os.stat(path)
        if st.st_mtime_ns >= settled_ns:
            raise _Unsettled(path)
        return path, (st.st_mtime_ns, st.st_size), contents(path)
    except OSError as exc:
        raise _Unsettled(path) from exc


def _still_valid(manifest: Any, key: str, env: Mapping[str, str]) -> bool:
    if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
        return False
    if manifest.get("key") != key or not _same_lookups(manifest["lookups"]):
        return False
    for name, digest in manifest["env"]:
        if _env_digest(env.get(name)) != digest:
            return False
    for file, stamp, digest in manifest["files"]:
        try:
            st = os.stat(file)
            if (st.st_mtime_ns, st.st_size) != stamp and file_digest(file) != digest:
                return False
        except OSError:
            return False
    for folder, (mtime_ns, _), listing in manifest["folders"]:
        try:
            if os.stat(folder).st_mtime_ns != mtime_ns and _listing_digest(folder) != listing:
                return False
        except OSError:
            return False
    root = Path(manifest["root"])
    return all(
        [str(m) for m in glob_files(root, pattern)] == matched
        for pattern, matched in manifest["globs"]
    )


def _same_lookups(lookups: Iterable[tuple[str, str]]) -> bool:
    """Whether each path looked at holds what it held (a project file where there was
    nothing changes the project)."""
    return all(entry_kind(path) == kind for path, kind in lookups)


def _listing_digest(folder: Path | str) -> bytes:
    return hashlib.sha256("\0".join(sorted(os.listdir(folder))).encode()).digest()


def _env_digest(value: str | None) -> bytes | None:
    # A hash, not the value: the manifest need not hold what the environment said.
    return None if value is None else hashlib.sha256(value.encode()).digest()


# --- the folder --------------------------------------------------------------------------


def _usable_folder(
    environ: Mapping[str, str] | None, *, create: bool, project: Path
) -> Path | None:
    """The cache folder, if it can be trusted (see the module's docstring) and does not lie
    in ``project``; else None, with one warning line."""
    folder = cache_folder(environ)
    if folder is None:
        return None
    if not folder.is_absolute():
        _warn_once(f"its folder '{folder}' is a relative path; give an absolute one")
        return None
    if Path(os.path.realpath(folder)).is_relative_to(project):
        _warn_once(f"its folder {folder} is inside the project {project}")
        return None
    try:
        if create:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(folder)
    except OSError:
        return None  # not there yet (nothing to load), or cannot be made: uncached
    problem = "is a symbolic link" if stat.S_ISLNK(st.st_mode) else _untrusted(st)
    if problem is not None:
        _warn_once(f"its folder {folder} {problem}")
        return None
    return folder


def _untrusted(st: os.stat_result) -> str | None:
    """Why a cache folder or entry with this status may hold what someone else put there."""
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return "belongs to another user"
    if st.st_mode & 0o022:
        return "can be written by others"
    return None


def _open_private(folder: Path, name: str) -> IO[bytes] | None:
    """``folder/name`` opened for reading when neither is a link and both pass
    ``_untrusted``; else None. The file is opened through the folder checked (no path is
    looked up twice), so neither can be swapped in between."""
    no_follow = os.O_RDONLY | os.O_NOFOLLOW
    try:
        folder_fd = os.open(folder, no_follow | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        if _untrusted(os.fstat(folder_fd)) is not None:
            return None
        # Non-blocking: a FIFO planted under the name must not hang the open.
        descriptor = os.open(name, no_follow | os.O_NONBLOCK, dir_fd=folder_fd)
    except OSError:
        return None
    finally:
        os.close(folder_fd)
    st = os.fstat(descriptor)
    if not stat.S_ISREG(st.st_mode) or _untrusted(st) is not None:
        os.close(descriptor)
        return None
    return os.fdopen(descriptor, "rb")


_warned: set[str] = set()


def _warn_once(reason: str) -> None:
    """Say once per process why the cache is off: a user who set the folder should know."""
    if reason not in _warned:
        _warned.add(reason)
        print(f"warning: compile cache off: {reason}", file=sys.stderr)


def _prune(folder: Path) -> None:
    """Keep the folder bounded: at most ``_ENTRIES_KEPT`` programs (the least recently
    written go first), and no template code of other versions untouched for a week."""
    try:
        found = list(os.scandir(folder))
    except OSError:
        return
    entries = [e for e in found if e.name.endswith(".pickle")]
    if len(entries) > _ENTRIES_KEPT:
        entries.sort(key=lambda e: e.stat().st_mtime_ns)
        for entry in entries[: len(entries) - _ENTRIES_KEPT // 2]:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
    current = _template_folder_name()
    week_ago = time.time() - 7 * 86_400
    for entry in found:
        if entry.name.startswith("templates-") and entry.name != current:
            with contextlib.suppress(OSError):
                if entry.stat().st_mtime < week_ago:
                    shutil.rmtree(entry.path)
