"""Prompt templates: Jinja2 in a sandbox, checked against declared inputs at load time.

    engine = TemplateEngine(project_root, [project_root / "prompts"])
    template = engine.compile(text, origin=origin, declared={"ticket"})
    template.render({"ticket": "My order never arrived"})

What is checked when a template is compiled, each problem reported at its file position:
syntax; every name read from the render variables against ``declared``; every ``include`` /
``import`` / ``extends`` (a quoted name, found in the template folders, no cycle), and the
same checks, transitively, inside the templates they name. Problems inside another template
file are reported at their position in that file, with the place that pulled it in: the fix
belongs there, and that file may be shared by several prompts.

Template names are looked up in the template folders (``search_paths``), the way Jinja users
expect; a name starting with ``./`` or ``../`` is relative to the template that writes it.
Either way the real file, symlinks resolved, must lie inside a template folder.

Literal braces: ``{`` and ``}`` alone are plain text, so most JSON needs nothing. Where text
would read as a tag (``{{``, ``{%``, ``{#``), wrap it in ``{% raw %}…{% endraw %}`` or write
the delimiter as an expression: ``{{ '{{' }}``.

Jinja2 is imported on the first compile, not when this module is imported. What a compiled
template needs to render (``CompiledTemplate``) lives in ``rendering``: a program loaded from
the compile cache renders without this module.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openprogram_yaml._file_reads import file_stamp
from openprogram_yaml.compile._template_text import (
    code_identifiers,
    column_of,
    identifier_columns,
    line_text,
    reference_col,
    syntax_error_position,
)
from openprogram_yaml.compile.paths import LINK, display_path, entry_kind, link_kind
from openprogram_yaml.compile.readset import settled
from openprogram_yaml.compile.rendering import CompiledTemplate
from openprogram_yaml.errors import ConfigError, Diagnostic
from openprogram_yaml.spec.positions import TextOrigin
from openprogram_yaml.spec.textfile import UnreadableFile, read_text

if TYPE_CHECKING:
    from openprogram_yaml.compile import _jinja, _jinja_analysis

__all__ = ["TemplateEngine"]


@dataclass(frozen=True, slots=True)
class _FileEntry:
    """A template file read and analysed, kept while its stamp holds."""

    stamp: tuple[int, int]
    source: str
    analysis: _jinja_analysis.Analysis | None
    problems: tuple[Diagnostic, ...]


@dataclass(eq=False, slots=True)
class _Check:
    """The state of one compile: what was found, and what the compiled template pins."""

    declared: frozenset[str]
    declared_by: str
    diagnostics: dict[Diagnostic, None] = field(default_factory=dict)
    variables: set[str] = field(default_factory=set)
    sources: dict[str, str] = field(default_factory=dict)
    links: dict[tuple[str, str], str] = field(default_factory=dict)
    done: set[tuple[Path, bool, frozenset[str]]] = field(default_factory=set)
    lookups: dict[str, str] = field(default_factory=dict)

    def add(self, origin: TextOrigin, line: int, col: int, message: str) -> None:
        position = origin.locate(line, col)
        self.diagnostics[Diagnostic(position.path, position.line, position.col, message)] = None


@dataclass(frozen=True, slots=True)
class _Unresolved:
    """Why a template name could not be resolved."""

    message: str
    missing: bool = False


@dataclass(frozen=True, slots=True)
class _Unit:
    """One template being checked, and how it is rendered."""

    key: str  # the Jinja name: the root's name, or a file's real path
    source: str
    analysis: _jinja_analysis.Analysis
    origin: TextOrigin
    base_dir: Path  # where ./ and ../ names start
    sees_inputs: bool  # False inside a template imported without context
    local_names: frozenset[str]  # variables of the including templates it also sees
    chain: tuple[Path, ...]  # files being included, outermost first, to catch cycles
    pulled_in: str  # "" for the root, else " (included at path:line:col)"


def _resolved(path: str) -> Path:
    # Every template of an agent file starts from the same file: resolve it once.
    return _resolved_absolute(os.path.abspath(path))


def _resolved_folder(path: str) -> Path:
    """The real folder of the file at ``path``.

    Agent files share few folders: the folder of a file that is not a link is its own
    folder's real path, resolved once for them all, with one lstat for the file.
    """
    absolute = os.path.abspath(path)
    if os.path.islink(absolute):
        return _resolved_absolute(absolute).parent
    return _resolved_absolute(os.path.dirname(absolute))


@functools.lru_cache(maxsize=4096)
def _resolved_absolute(path: str) -> Path:
    return Path(path).resolve()


def _all_settled(stamps: Iterable[tuple[int, int] | None], read_ns: int) -> bool:
    """Whether every file of ``stamps``, read from ``read_ns`` on, was there and had settled
    (``readset.settled``), so that its stamp vouches for what was read from it."""
    return all(stamp is not None and settled(stamp[0], read_ns) for stamp in stamps)


#: What a successful check found: variables read, the files pulled in (their text and
#: stamps), the names the includes resolved to, and every path the resolving looked at
#: with what was there (a template appearing in an earlier folder changes a resolution);
#: last, the files pulled in as paths, made once for every template compiled from it.
_Checked = tuple[
    frozenset[str],
    dict[str, str],
    dict[tuple[str, str], str],
    dict[str, tuple[int, int] | None],
    dict[str, str],
    frozenset[Path],
]
_CHECKED_KEPT = 8192
_ANALYSES_KEPT = 4096


class TemplateEngine:
    """Compiles prompt templates for one project.

    ``search_paths`` are the project's template folders (relative ones are taken from
    ``project_root``); with none, the project root itself is the one folder. Each must lie
    inside ``project_root``. ``analyses`` (by template text) may be shared between engines:
    what a template reads depends on its text alone.
    """

    def __init__(
        self,
        project_root: Path,
        search_paths: Sequence[Path] = (),
        *,
        analyses: dict[str, _jinja_analysis.Analysis] | None = None,
    ) -> None:
        self.project_root = Path(project_root).resolve()
        folders = [self.project_root / p for p in search_paths] or [self.project_root]
        outside = [p for p in folders if not p.resolve().is_relative_to(self.project_root)]
        if outside:
            raise ConfigError(
                [
                    Diagnostic(
                        str(p),
                        0,
                        0,
                        f"template folder {str(p)!r} is outside the project "
                        f"root {str(self.project_root)!r}",
                    )
                    for p in outside
                ]
            )
        self.search_paths: tuple[Path, ...] = tuple(folders)
        self._real_folders = tuple(p.resolve() for p in folders)
        self._files: dict[Path, _FileEntry] = {}
        self._lock = threading.Lock()
        self._checker: _jinja.PromptSandbox | None = None
        self._checked: dict[tuple[Any, ...], _Checked] = {}
        # What was kept from files that had not settled (``readset.settled``) when read: it
        # serves the rest of this compile, not the next (``forget_unsettled``).
        self._unsettled_checks: list[tuple[Any, ...]] = []
        self._unsettled_files: list[Path] = []
        self._analyses = {} if analyses is None else analyses

    def compile(
        self,
        source: str,
        *,
        origin: TextOrigin,
        declared: Collection[str],
        name: str | None = None,
        declared_by: str = "the method",
        cache_code: bool = True,
        lookups: dict[str, str] | None = None,
        real_path: Path | None = None,
        stamp: Callable[[str], tuple[int, int] | None] = file_stamp,
    ) -> CompiledTemplate:
        """Check ``source`` and every template it pulls in; raise ConfigError listing all
        problems, or return a template ready to render.

        ``declared`` are the names the render variables will hold; ``declared_by`` names who
        declares them in messages (``template reads 'x', which the method does not declare``).
        ``cache_code=False`` keeps the code Jinja generates for it out of the template code
        cache (for a source holding a secret). ``lookups`` receives every path looked at
        while resolving template names, with what was there (``paths.entry_kind``).
        ``real_path``: the file at ``origin``, links resolved, when the caller has it.
        ``stamp`` looks at a file a check kept pulls in (``Collector.stamp``: once an agent).
        """

        started_ns = time.time_ns()  # before anything is read: see _all_settled
        template_name = name or str(origin.start)
        base_dir = real_path.parent if real_path is not None else _resolved_folder(origin.path)
        checked_key = (
            source,
            frozenset(declared),
            declared_by,
            str(base_dir),  # a text hashes and compares faster than a path
            origin.path if origin.style == "file" else None,
        )
        known = self._checked.get(checked_key)
        if (
            known is not None
            and all(stamp(k) == v for k, v in known[3].items())
            and all(entry_kind(k) == v or link_kind(k) == v for k, v in known[4].items())
        ):
            # The same text, seeing the same names from the same folder, with every file it
            # pulls in unchanged and every name resolving as it did: what it reads and
            # includes is what it read last time.
            variables, sources, links = known[0], known[1], known[2]
            if lookups is not None:
                lookups.update(known[4])
            return self._compiled(
                source, template_name, origin, variables, sources, links, known[5], cache_code
            )
        check = _Check(frozenset(declared), declared_by)
        analysis, problems = self._parse(source, template_name, origin)
        check.diagnostics.update(dict.fromkeys(problems))
        if analysis is not None:
            root = _Unit(
                key=template_name,
                source=source,
                analysis=analysis,
                origin=origin,
                base_dir=base_dir,
                sees_inputs=True,
                local_names=frozenset(),
                # A prompt_file that pulls itself in is a cycle too.
                chain=(real_path or _resolved(origin.path),) if origin.style == "file" else (),
                pulled_in="",
            )
            self._check_unit(root, check)
        if check.diagnostics:
            raise ConfigError(list(check.diagnostics))

        sources = dict(check.sources)
        variables = frozenset(check.variables)
        stamps = {key: file_stamp(key) for key in sources}
        files = frozenset(Path(key) for key in sources)
        links = dict(check.links)
        if len(self._checked) >= _CHECKED_KEPT:
            self._checked.clear()
            self._unsettled_checks.clear()
        self._checked[checked_key] = (variables, sources, links, stamps, check.lookups, files)
        if not _all_settled(stamps.values(), started_ns):
            self._unsettled_checks.append(checked_key)  # a file it pulls in may change unseen
        if lookups is not None:
            lookups.update(check.lookups)
        return self._compiled(
            source, template_name, origin, variables, sources, links, files, cache_code
        )

    def forget_unsettled(self) -> None:
        """Drop the checks and files kept from files that had not settled when read: a
        file saved again within the same timestamp tick, with the same size, keeps its
        stamp. Called as a compile begins (``Build.begin``); within one compile they are
        shared, as each file is read once."""
        with self._lock:
            for path in self._unsettled_files:
                self._files.pop(path, None)
            self._unsettled_files.clear()
            for key in self._unsettled_checks:
                self._checked.pop(key, None)
            self._unsettled_checks.clear()

    @staticmethod
    def _compiled(
        source: str,
        template_name: str,
        origin: TextOrigin,
        variables: frozenset[str],
        sources: Mapping[str, str],
        links: Mapping[tuple[str, str], str],
        files: frozenset[Path],
        cache_code: bool,
    ) -> CompiledTemplate:
        return CompiledTemplate(
            name=template_name,
            source=source,
            variables=variables,
            files=files,
            origin=origin,
            _sources=dict(sources),
            _links=dict(links),
            cache_code=cache_code,
        )

    # --- checking ---------------------------------------------------------------------------

    def _environment(self) -> _jinja.PromptSandbox:
        if self._checker is None:
            from openprogram_yaml.compile import _jinja

            self._checker = _jinja.PromptSandbox()
        return self._checker

    def _parse(
        self, source: str, name: str, origin: TextOrigin
    ) -> tuple[_jinja_analysis.Analysis | None, tuple[Diagnostic, ...]]:
        from openprogram_yaml.compile import _jinja, _jinja_analysis

        env = self._environment()
        try:
            analysis = self._analyses.get(source)
            if analysis is None:
                analysis = _jinja_analysis.simple_analysis(env, source) or _jinja_analysis.analyze(
                    env, source, name, origin.path
                )
                if len(self._analyses) >= _ANALYSES_KEPT:
                    self._analyses.clear()
                self._analyses[source] = analysis
        except _jinja.TemplateSyntaxError as exc:
            line, col = syntax_error_position(source, exc.message or str(exc), exc.lineno)
            position = origin.locate(line, col)
            message = _syntax_message(exc.message or str(exc))
            return None, (Diagnostic(position.path, position.line, position.col, message),)
        except _jinja_analysis.TemplateTooDeep as deep:
            position = origin.locate(deep.line, deep.col)
            return None, (Diagnostic(position.path, position.line, position.col, str(deep)),)
        problems = []
        lines = source.split("\n") if analysis.failures else []
        for line, message in analysis.failures:
            text, col = _failure(message, env, line_text(lines, line))
            position = origin.locate(line, col)
            problems.append(Diagnostic(position.path, position.line, position.col, text))
        return analysis, tuple(problems)

    def _check_unit(self, unit: _Unit, check: _Check) -> None:
        undeclared = False
        for read in unit.analysis.reads:
            if read.name in unit.analysis.top_level or read.name in unit.local_names:
                continue
            if unit.sees_inputs and read.name in check.declared:
                check.variables.add(read.name)
            else:
                undeclared = True
        lines = unit.source.split("\n") if undeclared or unit.analysis.references else []
        if undeclared:
            # Columns are found only for a template with a problem: it takes a scan of every
            # tag, and each read's column depends on the reads before it on its line.
            columns = identifier_columns(code_identifiers(unit.source))
            hits: dict[tuple[int, str], int] = {}
            for read in unit.analysis.reads:
                col = column_of(read, columns, lines, hits)
                if read.name in unit.analysis.top_level or read.name in unit.local_names:
                    continue
                if not (unit.sees_inputs and read.name in check.declared):
                    message = _undeclared_message(read.name, unit, check)
                    check.add(unit.origin, read.line, col, message)

        after: dict[int, int] = {}  # line -> column of the reference found last there
        for ref in unit.analysis.references:
            col = reference_col(line_text(lines, ref.line), ref, after.get(ref.line, 0))
            after[ref.line] = col
            self._follow(unit, ref, check, col)

    def _follow(self, unit: _Unit, ref: _jinja_analysis.Reference, check: _Check, col: int) -> None:
        if ref.name is None:
            check.add(unit.origin, ref.line, col, _COMPUTED_NAME.format(kind=ref.kind))
            return
        found = self._resolve(ref.name, unit.base_dir, check.lookups)
        if isinstance(found, _Unresolved):
            if not (found.missing and ref.ignore_missing):
                check.add(unit.origin, ref.line, col, found.message)
            return
        if found in unit.chain:
            looped = (*unit.chain[unit.chain.index(found) :], found)
            cycle = " → ".join(_display_str(p) for p in looped)
            check.add(
                unit.origin,
                ref.line,
                col,
                f"include cycle: {cycle}; a template cannot pull itself in, directly or "
                "through others",
            )
            return
        entry = self._load(found)
        key = str(found)
        check.sources[key] = entry.source
        check.links[(ref.name, unit.key)] = key
        check.diagnostics.update(dict.fromkeys(entry.problems))
        if entry.analysis is None:
            return
        # An import without context runs the other template with the globals only.
        sees_inputs = unit.sees_inputs and ref.with_context
        local_names = (unit.local_names | ref.local_names) if ref.with_context else frozenset()
        done_key = (found, sees_inputs, local_names)
        if done_key in check.done:
            return
        check.done.add(done_key)
        site = unit.origin.locate(ref.line, col)
        verb = {"include": "included", "import": "imported", "extends": "extended"}[ref.kind]
        self._check_unit(
            _Unit(
                key=key,
                source=entry.source,
                analysis=entry.analysis,
                origin=TextOrigin(_display_str(found), 1, 1, "file"),
                base_dir=found.parent,
                sees_inputs=sees_inputs,
                local_names=local_names,
                chain=(*unit.chain, found),
                pulled_in=f" ({verb} at {site})",
            ),
            check,
        )

    def _resolve(self, name: str, base_dir: Path, lookups: dict[str, str]) -> Path | _Unresolved:
        """The real path of template ``name``, or why there is none; each path looked at
        goes to ``lookups`` with what was there."""
        if not name.strip() or "\\" in name or Path(name).is_absolute() or "\x00" in name:
            return _Unresolved(
                f"template name {name!r} is not a relative path; name templates relative to "
                f"the template folders ({self._folder_list()})"
            )
        relative = name.startswith(("./", "../"))
        candidates = [base_dir / name] if relative else [f / name for f in self.search_paths]
        for candidate in candidates:
            kind = lookups[str(candidate)] = entry_kind(candidate)
            if kind != "file":
                if kind == "other":
                    return _Unresolved(f"template {name!r} ({candidate}) is not a regular file")
                continue
            real = candidate.resolve()
            if str(real) != os.path.normpath(candidate):
                # Through a link: where it leads decides, which the target's stamp won't tell.
                lookups[str(candidate)] = LINK + str(real)
            if not any(real.is_relative_to(folder) for folder in self._real_folders):
                return _Unresolved(
                    f"template {name!r} resolves to {str(real)!r}, outside the template "
                    f"folders ({self._folder_list()}); templates may not leave them"
                )
            return real
        where = (
            f"next to this template ({_display_str(base_dir)})"
            if relative
            else (f"in the template folders ({self._folder_list()})")
        )
        return _Unresolved(f"template {name!r} not found {where}", missing=True)

    def _folder_list(self) -> str:
        return ", ".join(_display_str(p) + os.sep for p in self.search_paths)

    def _load(self, path: Path) -> _FileEntry:
        read_ns = time.time_ns()
        try:
            stat = path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
        except OSError:
            stamp = (0, 0)
        with self._lock:
            cached = self._files.get(path)
        if cached is not None and cached.stamp == stamp:
            return cached
        origin = TextOrigin(_display_str(path), 1, 1, "file")
        try:
            source = read_text(path, origin.path)
        except UnreadableFile as exc:
            (problem,) = exc.diagnostics
            if not exc.inside:
                problem = Diagnostic(origin.path, 0, 0, f"cannot read template: {exc.reason}")
            return _FileEntry(stamp, "", None, (problem,))
        analysis, problems = self._parse(source, str(path), origin)
        entry = _FileEntry(stamp, source, analysis, problems)
        with self._lock:
            self._files[path] = entry
            if not _all_settled([stamp], read_ns):
                self._unsettled_files.append(path)  # it may change unseen
        return entry


# --- messages and positions ------------------------------------------------------------------

_COMPUTED_NAME = (
    "{kind} needs the template's name in quotes (e.g. {{% {kind} 'partials/header.j2' %}}); "
    "a computed name cannot be checked when the agent loads"
)
_LITERAL_HINT = (
    "; if this text is meant literally (JSON, code), wrap it in {% raw %}…{% endraw %} "
    "or write {{ '{{' }}"
)


def _syntax_message(message: str) -> str:
    unclosed = re.search(r"innermost block that needs to be closed is '(\w+)'", message)
    if unclosed is not None:
        tag = unclosed.group(1)
        return f"template syntax error: this {{% {tag} %}} is never closed; add {{% end{tag} %}}"
    text = f"template syntax error: {message.rstrip('.')}"
    # Lexer and parser messages start in lower case; a stray "{{" in pasted JSON or code
    # is the usual cause of these.
    if message.startswith(("unexpected", "expected token")):
        text += _LITERAL_HINT
    return text


def _failure(message: str, env: _jinja.PromptSandbox, text: str) -> tuple[str, int]:
    """A message and column for a problem Jinja's compiler found (unknown filter …) on the
    line whose text is ``text``."""
    unsafe = re.match(r"template reads attribute '([^']+)'", message)
    if unsafe is not None:
        at = re.search(rf"['\"]?{re.escape(unsafe.group(1))}(?!\w)", text)
        return message, (at.start() + 1 if at else 1)
    unknown = re.match(r"No (filter|test) named '([^']+)'", message)
    if unknown is None:
        found = [p for p in (text.find("{{"), text.find("{%")) if p >= 0]
        return message.rstrip("."), min(found, default=0) + 1
    kind, name = unknown.groups()
    known = env.filters if kind == "filter" else env.tests
    close = difflib.get_close_matches(name, list(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    at = re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", text)
    return f"there is no {kind} named {name!r}{hint}", (at.start() + 1 if at else 1)


def _undeclared_message(name: str, unit: _Unit, check: _Check) -> str:
    if not unit.sees_inputs:
        return (
            f"template reads {name!r}, but it is used without context (what 'import' does "
            f"unless told otherwise) and sees no inputs; pass {name!r} to its macro as an "
            f"argument, or add 'with context'{unit.pulled_in}"
        )
    known = sorted(check.declared | unit.local_names)
    close = difflib.get_close_matches(name, known, n=1)
    if close:
        hint = f"; did you mean {close[0]!r}?"
    elif check.declared:
        hint = "; declared: " + ", ".join(repr(n) for n in sorted(check.declared))
    else:
        hint = f"; {check.declared_by} declares no inputs"
    return (
        f"template reads {name!r}, which {check.declared_by} does not declare in 'inputs'"
        f"{hint}{unit.pulled_in}"
    )


def _display_str(path: Path) -> str:
    return str(display_path(path))
