"""State shared while compiling: where problems go, and the project's settings."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._file_reads import file_stamp
from ..errors import ConfigError, Diagnostic
from ..redaction import redact
from ..spec.positions import TextOrigin
from ..spec.yamlread import Loc, SourceMap
from .paths import Resolutions

if TYPE_CHECKING:
    from ..runtimes.rules import ProviderConfig, RuntimeRule
    from ..spec.models import ToolsetSpec
    from .rendering import CompiledTemplate
    from .schemas import SchemaFiles
    from .templates import TemplateEngine

__all__ = ["Collector", "ProjectContext"]


class Collector:
    """Gathers every problem (and every file read and path looked at) while compiling."""

    def __init__(self) -> None:
        self.diagnostics: list[Diagnostic] = []
        self.files: set[Path] = set()
        #: Paths looked at that may have held something else (``paths.entry_kind``).
        self.lookups: dict[str, str] = {}
        #: Secrets from the environment the texts being compiled may hold: no message shows
        #: one, and no template holding one has its code cached (see ``template``).
        self.secrets: frozenset[str] = frozenset()
        #: Schema files already parsed in this compile, when the compile shares them.
        self.schema_files: SchemaFiles | None = None
        #: Paths resolved in this compile (the compile of many agents shares one).
        self.resolutions = Resolutions()
        #: Template files named by ``prompt_file`` or ``instructions_file`` and read in this
        #: compile, by path: (the path as messages show it, its text, its stamp as read:
        #: mtime and size). Shared as the above.
        self.prompt_files: dict[Path, tuple[str, str, tuple[int, int]]] = {}
        #: Each file's stamp (mtime and size; None: not there) at this collector's first
        #: look (``stamp``). One agent's compile looks at a shared template or schema file
        #: once: the text it reuses, the checks it reuses and its read-set then all speak of
        #: the file as it was at that look (not each of a later one, which could pair a
        #: stamp taken after a change with a text read before it).
        self.stamps: dict[str, tuple[int, int] | None] = {}

    def stamp(self, path: Path | str) -> tuple[int, int] | None:
        """``file_stamp(path)`` as at this collector's first look at ``path``."""
        key = str(path)
        if key not in self.stamps:
            self.stamps[key] = file_stamp(key)
        return self.stamps[key]

    def at(self, source: SourceMap, loc: Loc, message: str, *, key: bool = False) -> None:
        pos = source.at(loc, key=key)
        self._keep([Diagnostic(pos.path, pos.line, pos.col, message)])

    def _keep(self, diagnostics: Iterable[Diagnostic]) -> None:
        # Messages quote values of the file (a schema error quotes the value it refuses),
        # and any value may have been read from the environment.
        for diagnostic in diagnostics:
            message = redact(diagnostic.message, self.secrets)
            if message != diagnostic.message:
                diagnostic = dataclasses.replace(diagnostic, message=message)
            self.diagnostics.append(diagnostic)

    def schema(
        self, value: Any, *, ctx: ProjectContext, base_file: Path, source: SourceMap, loc: Loc
    ) -> tuple[Any, bool]:
        """``(bundled schema, ok)``: file ``$ref``s inlined and the result checked as a JSON
        Schema; problems (at their positions) and the files read are kept."""
        from .schemas import bundle_schema

        bundle = bundle_schema(
            value,
            base_file=base_file,
            root=ctx.root,
            search=ctx.schema_dirs,
            source=source,
            loc=loc,
            shared=self.schema_files,
            resolutions=self.resolutions,
            stamp=self.stamp,
        )
        self.files.update(bundle.files)
        self.lookups.update(bundle.lookups)
        self._keep(bundle.diagnostics)
        return bundle.schema, not bundle.diagnostics

    def template(
        self,
        engine: TemplateEngine,
        text: str,
        origin: TextOrigin,
        declared: Iterable[str],
        name: str,
        declared_by: str,
        real_path: Path | None = None,
    ) -> CompiledTemplate | None:
        """Compile a template, keeping its problems and the files it pulls in.

        A text holding one of ``secrets`` is never written to the template code cache.
        ``real_path``: the file the template is in, links resolved, when the caller has it.
        """
        try:
            compiled = engine.compile(
                text,
                origin=origin,
                declared=frozenset(declared),
                name=name,
                declared_by=declared_by,
                cache_code=not any(secret in text for secret in self.secrets),
                lookups=self.lookups,
                real_path=real_path,
                stamp=self.stamp,
            )
        except ConfigError as exc:
            self._keep(exc.diagnostics)
            return None
        self.files.update(compiled.files)
        return compiled


@dataclass(frozen=True, slots=True)
class ProjectContext:
    """What a project (``openprogram.yaml``) gives every agent it holds."""

    root: Path
    template_dirs: tuple[Path, ...] = ()
    schema_dirs: tuple[Path, ...] = ()
    toolsets: Mapping[str, ToolsetSpec] = field(default_factory=dict)
    providers: Mapping[str, ProviderConfig] = field(default_factory=dict)
    rules: tuple[RuntimeRule, ...] = ()
    secrets: frozenset[str] = frozenset()
    #: Test files of the repository (``tests:`` globs), and where recordings are kept.
    test_files: tuple[Path, ...] = ()
    recordings: Path | None = None
    #: The project's ``judge_model`` (tests' ``judge:`` expectations; a test file's wins).
    judge_model: str | None = None
    #: The environment variables the project file read, with their values.
    env: tuple[tuple[str, str | None], ...] = ()
    #: The project's file patterns (``agents:`` and ``tests:``), each with what it matched.
    globs: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: Installed packages ``python`` tools may name, besides the project's own modules.
    python_packages: tuple[str, ...] = ()
