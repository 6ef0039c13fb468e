"""One build: what successive compiles of the same files share.

``Build`` lives across compiles (the runner's reload keeps one): it owns the template
engines (with the template files and analyses they keep) and the agents compiled last
time, each with the read-set (``compile.readset``) of what that agent alone depends on.
An agent whose read-set still holds is taken as it is; a save renaming one file over
another changes a folder's listing, which only the project's patterns depend on, so one
saved file recompiles the agents that read it and no other. A watcher may tell the build
which paths changed (``Build.report_changes``); the next compile then checks the reads of
only the agents that read one of them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .readset import Checked, ReadSet, env_digest

if TYPE_CHECKING:
    from ..spec.loader import AgentDocument
    from ._jinja_analysis import Analysis
    from .context import ProjectContext
    from .program import Agent
    from .templates import TemplateEngine

__all__ = ["Build", "KeptAgent"]

#: How many compiles back a report is remembered: an agent kept longer unchecked (left
#: out of the project meanwhile) has its reads checked when it comes back.
_REPORTS_KEPT = 64


@dataclass(eq=False, slots=True)
class KeptAgent:
    """An agent compiled by an earlier compile of this build, with what it read."""

    #: A digest of what the project gave the agent (``project._context_key``).
    context: str
    doc: AgentDocument
    agent: Agent
    files: frozenset[Path]
    reads: ReadSet
    #: Every path ``reads`` names (files read, paths looked at), as the watcher reports them.
    paths: frozenset[str] = frozenset()
    #: The compile (``Build.compiles``) at which its reads last held.
    held_at: int = 0
    #: Whether it reached a file or folder through a symbolic link (``paths.LINK``): a
    #: watcher reports the link's folder, not the paths read, so its reads are checked.
    follows_links: bool = False


@dataclass(eq=False, slots=True)
class Build:
    """What successive compiles of the same repository share (see the module docstring).

    A compile given no build makes a fresh one, so it reads everything anew.
    """

    environ: Mapping[str, str] | None = None
    engines: dict[tuple[Path, tuple[Path, ...]], TemplateEngine] = field(default_factory=dict)
    #: Template analyses by text: what a template reads depends on its text alone, and
    #: repositories repeat texts (a shared prompt file, one inline prompt in many agents).
    analyses: dict[str, Analysis] = field(default_factory=dict)
    agents: dict[Path, KeptAgent] = field(default_factory=dict)
    #: One ``Path`` for each path text seen: making 10,000 anew costs 50 ms a compile, and
    #: sets of them compare by identity first.
    paths: dict[str, Path] = field(default_factory=dict)
    #: Compiles begun with this build.
    compiles: int = 0
    #: Whether the agents compiled are kept for the next compile; False for a build made
    #: for one compile (``compile_path`` given none), which nothing would reuse.
    keeps_agents: bool = True
    #: For recent compiles: the paths a watcher reported changed just before it, or None
    #: when nobody said (every read was checked then).
    _reports: dict[int, frozenset[str] | None] = field(default_factory=dict, init=False)
    _reported: frozenset[str] | None = field(default=None, init=False)
    #: Within one compile: the paths reported changed since a given compile.
    _since: dict[int, frozenset[str] | None] = field(default_factory=dict, init=False)

    @property
    def env(self) -> Mapping[str, str]:
        return os.environ if self.environ is None else self.environ

    def engine(self, ctx: ProjectContext, agent_file: Path) -> TemplateEngine:
        """The template engine of an agent: the project's template folders, then the agent's
        own folder. Agents side by side share one, and successive compiles do too."""
        from .templates import TemplateEngine

        folders = (*ctx.template_dirs, agent_file.parent)
        key = (ctx.root, folders)
        engine = self.engines.get(key)
        if engine is None:
            engine = self.engines[key] = TemplateEngine(
                ctx.root, search_paths=folders, analyses=self.analyses
            )
        return engine

    def path(self, text: str) -> Path:
        """The ``Path`` of ``text``, made once."""
        found = self.paths.get(text)
        if found is None:
            found = self.paths[text] = Path(text)
        return found

    def report_changes(self, paths: Iterable[Path | str]) -> None:
        """What a watcher saw change since the last compile: the next compile checks the
        reads of the agents that read one of these paths, and takes the others as they are.

        Whoever reports must report every change the compile is to see (the runner's
        reload reports each batch of its watcher, which watches every file read; its first
        compile, and the one after the watcher starts, report nothing and check all). A
        compile given no report checks every read.
        """
        # Reports add up until a compile begins (one may fail before it does).
        self._reported = (self._reported or frozenset()) | frozenset(map(str, paths))

    def begin(self) -> None:
        """Start a compile: it uses the report made since the last one, if any."""
        self.compiles += 1
        self._reports[self.compiles] = self._reported
        self._reports.pop(self.compiles - _REPORTS_KEPT, None)
        self._reported = None
        self._since.clear()
        for engine in self.engines.values():
            engine.forget_unsettled()

    def _changed_since(self, compile: int) -> frozenset[str] | None:
        """Every path reported changed after compile ``compile``; None if a compile since
        had no report (or is too old to remember)."""
        if compile not in self._since:
            found: set[str] = set()
            for n in range(compile + 1, self.compiles + 1):
                report = self._reports.get(n)
                if report is None:
                    self._since[compile] = None
                    break
                found |= report
            else:
                self._since[compile] = frozenset(found)
        return self._since[compile]

    def kept(self, path: Path, context: str, checked: Checked) -> KeptAgent | None:
        """The agent compiled from ``path`` last time, if nothing it read has changed."""
        kept = self.agents.get(path)
        if kept is None or kept.context != context:
            return None
        reported = self._changed_since(kept.held_at)
        if reported is not None and not kept.follows_links and kept.paths.isdisjoint(reported):
            # The watcher saw none of its files change; the environment is not watched.
            env = self.env
            changed = any(env_digest(env.get(name)) != value for name, value in kept.reads.env)
        else:
            changed = kept.reads.changed(self.env, checked) is not None
        if changed:
            del self.agents[path]
            return None
        kept.held_at = self.compiles
        return kept
