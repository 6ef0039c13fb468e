"""The compile cache: compiled programs kept on disk, so that running unchanged files does
not compile them again.

A one-shot ``openprogram-run`` spends most of its own time compiling: reading YAML with
positions, validating it, checking templates and schemas. When nothing that compile read has
changed, the program it built is loaded instead, and neither YAML nor pydantic is imported.

An entry is two files: ``KEY.json``, the compile's read-set (``compile.readset.ReadSet``:
every file read with its stamp and sha256, every path looked at with what was there,
nothing included, the files each project pattern matched, a digest of each environment
variable named, the installed libraries), and ``KEY.pickle``, the program. The read-set is
plain data, checked before the pickle is opened: a file whose stamp moved is compared by
its contents. The key names this package's own code, the Python version, the working
directory (messages show paths relative to it), and ``PATH`` and ``PYTHONPATH`` (command
and python tools are found through them).

A file that changed while it was being compiled (modified less than ``readset.RACY_NS``
before the compile began, or after; see ``readset.settled``) is not trusted, and the program
is not kept.

Where: ``$OPENPROGRAM_CACHE_DIR``, else ``$XDG_CACHE_HOME/openprogram-yaml``, else
``~/.cache/openprogram-yaml``. ``OPENPROGRAM_CACHE=off`` turns the cache off. A program that
holds a secret (a key or header value from the environment) is never written.
``OPENPROGRAM_CACHE_DEBUG=1`` says on stderr why a compiled program was not kept.

Programs are pickles, and Jinja's template code holds a pickle too: loading one runs code,
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
import json
import os
import pickle
import shutil
import stat
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from .._file_writes import write_atomically
from .._version import __version__
from .paths import find_project_root
from .program import Program
from .readset import ReadSet, settled

if TYPE_CHECKING:
    from jinja2 import BytecodeCache

__all__ = ["cache_folder", "compile_cached", "load", "store", "template_code_cache"]

#: Bumped whenever what an entry holds changes shape.
_FORMAT = 4
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
        opened = _open_private(folder, f"{key}.json")
        if opened is None:
            return None
        with opened as stream:
            manifest = json.load(stream)
        if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
            return None
        if manifest.get("key") != key:
            return None
        if ReadSet.from_data(manifest["reads"]).changed(env) is not None:
            return None
        opened = _open_private(folder, f"{key}.pickle")
        if opened is None:
            return None
        with opened as stream:
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
    With ``OPENPROGRAM_CACHE_DEBUG`` set, a program not kept says why on stderr.
    """
    env = os.environ if environ is None else environ
    if any(agent.secrets for agent in program.agents.values()):
        return _not_kept(env, "the program holds a secret from the environment")
    reads = program.reads
    if any(mtime_ns < 0 or not settled(mtime_ns, started_ns) for _, mtime_ns, _, _ in reads.files):
        # Its stamp cannot vouch for it.
        return _not_kept(env, "a file it read changed while it was compiled")
    changed = reads.changed(env)
    if changed is not None:
        return _not_kept(env, f"what it read changed meanwhile ({changed})")
    folder = _usable_folder(environ, create=True, project=program.root)
    if folder is None:
        return _not_kept(env, "no usable cache folder")
    key = _key(path, env)
    manifest = {"format": _FORMAT, "key": key, "reads": reads.to_data()}
    try:
        data = pickle.dumps(program, pickle.HIGHEST_PROTOCOL)
        # Not synced: an entry lost in a crash costs one compile, and a torn one fails to
        # load. The old read-set goes first: it must never vouch for the new program.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(folder / f"{key}.json")
        write_atomically(folder / f"{key}.pickle", data, sync=False, mode=0o600)
        text = json.dumps(manifest, separators=(",", ":")).encode()
        write_atomically(folder / f"{key}.json", text, sync=False, mode=0o600)
    except Exception as exc:  # a full disk, or a program that does not pickle: it runs uncached
        return _not_kept(env, f"{type(exc).__name__}: {exc}")
    _prune(folder)
    return True


def _not_kept(env: Mapping[str, str], reason: str) -> bool:
    """False, saying why on stderr when ``OPENPROGRAM_CACHE_DEBUG`` is set: a program that
    silently stops being kept (one that no longer pickles) would otherwise hide its bug
    behind a slower start."""
    if env.get("OPENPROGRAM_CACHE_DEBUG", "").strip().lower() not in ("", "0", "off", "no"):
        print(f"compile cache: not kept: {reason}", file=sys.stderr)
    return False


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
    # surrogateescape: a path, a folder or PATH may hold bytes that are not UTF-8 (os keeps
    # them as surrogates), which a plain encode() raised on, a traceback before any run.
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogateescape")).hexdigest()[:32]


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
                    line = f"{folder}/{name}:{st.st_mtime_ns}:{st.st_size}\0"
                    digest.update(line.encode("utf-8", "surrogateescape"))
        _fingerprint.append(digest.hexdigest())
    return _fingerprint[0]


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
            for name in (entry.path, entry.path[: -len(".pickle")] + ".json"):
                with contextlib.suppress(OSError):
                    os.unlink(name)
    current = _template_folder_name()
    week_ago = time.time() - 7 * 86_400
    for entry in found:
        if entry.name.startswith("templates-") and entry.name != current:
            with contextlib.suppress(OSError):
                if entry.stat().st_mtime < week_ago:
                    shutil.rmtree(entry.path)
