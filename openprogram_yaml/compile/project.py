"""Put a project together: ``openprogram.yaml``, its agent files, and the links between them.

``compile_path`` is the one entry point the runner uses. It takes an agent file, a project
folder (one holding ``openprogram.yaml``), or that file itself. An agent file inside a project
is compiled with the whole project, so its templates, schemas, toolsets, providers and the
other agents its tools call are all there.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError, Diagnostic
from ..spec.loader import AgentDocument, PartialDocument, load_agent_file, load_document
from ..spec.models import ProjectSpec, TestFileSpec
from ..spec.suggest import did_you_mean
from ..spec.yamlread import SourceMap
from .agent import PendingMethodTools, check_valid_parts, compile_agent
from .build import Build, KeptAgent
from .context import Collector, ProjectContext
from .paths import (
    LINK,
    PROJECT_FILE,
    Resolutions,
    display_path,
    entry_kind,
    find_project_root,
    glob_file_names,
    glob_problem,
    project_root_lookups,
)
from .program import Agent, Program
from .readset import (
    Checked,
    FileRead,
    ReadSet,
    env_digest,
    file_digest,
    file_reads,
    library_stamps,
)
from .schemas import SchemaFiles

if TYPE_CHECKING:
    from .prompt_tests import CompiledTest

__all__ = ["compile_agent_files", "compile_path", "load_project"]


def load_project(root: Path, col: Collector, build: Build) -> tuple[ProjectContext, list[Path]]:
    """The project settings in ``root/openprogram.yaml`` and the agent files it names."""
    from ..runtimes.rules import ProviderConfig, RuntimeRule

    path = root / PROJECT_FILE
    col.files.add(path)
    try:
        spec, source, secrets, env_names = load_document(
            path, ProjectSpec, display=str(display_path(path)), environ=build.environ
        )
    except ConfigError as exc:
        col.diagnostics.extend(exc.diagnostics)
        return ProjectContext(root), []

    def folders(key: str, entries: list[str]) -> tuple[Path, ...]:
        found = []
        for i, entry in enumerate(entries):
            target, problem = col.resolutions.resolve_inside(path, entry, root, col.lookups)
            if target is None:
                col.at(source, (key, i), str(problem))
            elif (col.lookups.setdefault(str(target), entry_kind(target))) != "folder":
                col.at(source, (key, i), f"'{entry}' is not a folder ({target})")
            else:
                found.append(target)
        return tuple(found)

    globs: list[tuple[str, tuple[str, ...]]] = []

    def matching(key: str, patterns: list[str]) -> dict[Path, None]:
        found: dict[Path, None] = {}  # ordered, and a set: globs may overlap
        for i, pattern in enumerate(patterns):
            problem = glob_problem(pattern, path)
            if problem is not None:
                col.at(source, (key, i), problem)
                continue
            matched = glob_file_names(root, pattern)
            globs.append((pattern, tuple(matched)))
            if not matched:
                col.at(source, (key, i), f"'{pattern}' matches no file under {root}")
            inside = str(root).rstrip(os.sep) + os.sep
            for m in matched:
                if m.startswith(inside):
                    found[build.path(m)] = None
                else:  # through a symlink
                    col.at(source, (key, i), f"'{pattern}' matches {m}, outside the project")
        return found

    agents = {m: None for m in matching("agents", spec.agents) if m.name != PROJECT_FILE}
    test_files = matching("tests", spec.tests)
    recordings = None
    if spec.recordings is not None:
        target, problem = col.resolutions.resolve_inside(path, spec.recordings, root, col.lookups)
        if target is None:
            col.at(source, ("recordings",), str(problem))
        else:
            recordings = target
    providers = {
        name: ProviderConfig(
            name=name,
            runtime=p.runtime,
            base_url=p.base_url,
            api_key_env=p.api_key_env,
            headers=dict(p.headers),
            timeout_s=p.timeout_s,
            options=dict(p.options),
        )
        for name, p in spec.providers.items()
    }
    ctx = ProjectContext(
        root=root,
        template_dirs=folders("templates", spec.templates),
        schema_dirs=folders("schemas", spec.schemas),
        toolsets=dict(spec.toolsets),
        providers=providers,
        rules=tuple(RuntimeRule(r.match, r.runtime, dict(r.options)) for r in spec.runtimes),
        secrets=frozenset(secrets),
        test_files=tuple(test_files),
        recordings=recordings,
        judge_model=spec.judge_model,
        env=tuple((n, build.env.get(n)) for n in sorted(env_names)),
        globs=tuple(globs),
        python_packages=_python_packages(spec, source, col),
    )
    _check_shared_toolsets(spec, source, col)
    return ctx, list(agents)


def _python_packages(spec: ProjectSpec, source: SourceMap, col: Collector) -> tuple[str, ...]:
    names = []
    for i, name in enumerate(spec.python_packages):
        if all(part.isidentifier() for part in name.split(".")):
            names.append(name)
        else:
            col.at(source, ("python_packages", i), f"'{name}' is not a Python package name")
    return tuple(names)


def _check_shared_toolsets(spec: ProjectSpec, source: SourceMap, col: Collector) -> None:
    for name, ts in spec.toolsets.items():
        for i, inc in enumerate(ts.includes):
            if inc not in spec.toolsets and inc not in ("full", "none"):
                col.at(
                    source,
                    ("toolsets", name, "includes", i),
                    f"toolset '{name}' includes '{inc}', which is not a shared toolset"
                    f"{did_you_mean(inc, sorted(spec.toolsets))}",
                )


def _failed_to_load(name: str, failed: Mapping[str, Path]) -> str:
    """A follow-on problem: it names what failed, whose own errors are reported too."""
    return f"agent '{name}' failed to load (see the errors in {display_path(failed[name])})"


def _link_method_tools(
    agents: Mapping[str, Agent], col: Collector, failed: Mapping[str, Path]
) -> None:
    for agent in agents.values():
        pending = agent.method_tools
        if not isinstance(pending, PendingMethodTools):
            continue
        for tool_name, (ref, doc, loc) in pending.refs.items():
            agent_name, _, method_name = ref.rpartition(".")
            owner = agents.get(agent_name or agent.name)
            if owner is None and agent_name in failed:
                problem = _failed_to_load(agent_name, failed)
                col.at(doc.source, loc, f"tool '{tool_name}': {problem}")
                continue
            if owner is None:
                col.at(
                    doc.source,
                    loc,
                    f"tool '{tool_name}' calls agent '{agent_name}', which is not in this "
                    f"project{did_you_mean(agent_name, sorted(agents))}",
                )
                continue
            target = owner.methods.get(method_name)
            if target is None:
                known = sorted(owner.methods)
                col.at(
                    doc.source,
                    loc,
                    f"tool '{tool_name}' calls method '{method_name}', which agent "
                    f"'{owner.name}' does not have{did_you_mean(method_name, known)}",
                )
                continue
            pending[tool_name] = target


# --- recompiling only what changed -------------------------------------------------------
#
# A reload recompiles the whole project, but an agent whose own reads (its file, and every
# template, schema and tool module it was built from, the lookups that resolved them, its
# environment variables) and project settings are unchanged is taken from the build.


def _fresh_agent(kept: KeptAgent) -> Agent:
    # Method tools are linked anew each compile (the agents they call may have changed);
    # the kept agent may still serve runs of an older Program, so it is not mutated.
    pending = kept.agent.method_tools
    refs = pending.refs if isinstance(pending, PendingMethodTools) else {}
    if not refs:
        return kept.agent  # nothing to link: the agent is immutable as it is
    return dataclasses.replace(kept.agent, method_tools=PendingMethodTools(refs))


def _context_key(ctx: ProjectContext) -> str:
    """What the project gives its agents: the project file's contents say it all, with the
    environment it read and the folders it named. A digest: every agent compares it."""
    project = file_digest(str(ctx.root / PROJECT_FILE))
    parts = (ctx.root, ctx.template_dirs, ctx.schema_dirs, project, ctx.env)
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _env_reads(names: Iterable[str], env: Mapping[str, str]) -> tuple[tuple[str, str | None], ...]:
    return tuple((name, env_digest(env.get(name))) for name in sorted(names))


def compile_agent_files(
    paths: Iterable[Path],
    *,
    environ: Mapping[str, str] | None = None,
    context: ProjectContext | None = None,
    collector: Collector | None = None,
    build: Build | None = None,
) -> Program:
    """Load, validate and compile agent files into one ``Program``.

    ``build`` carries what earlier compiles of the same files found (a reload keeps one);
    without it everything is read anew. Raises ``ConfigError`` with every problem of every
    file.
    """
    build = build or Build(environ, keeps_agents=False)
    col = collector or Collector()
    # A project's files come resolved from ``load_project``; others are resolved here.
    resolved = list(paths) if context is not None else [p.resolve() for p in paths]
    ctx = context or ProjectContext(
        find_project_root(resolved[0]) if resolved else Path.cwd().resolve()
    )
    return _compile_agents(resolved, ctx, col, build, time.time_ns())


def _compile_agents(
    resolved: list[Path], ctx: ProjectContext, col: Collector, build: Build, started_ns: int
) -> Program:
    build.begin()
    env = build.env
    ctx_key = _context_key(ctx)
    checked = Checked()
    schema_files = SchemaFiles()
    resolutions = Resolutions()
    prompt_files: dict[Path, tuple[str, str, tuple[int, int]]] = {}
    agents: dict[str, Agent] = {}
    # Only the documents of agents with tests are kept to the end: a document with its
    # source map weighs more than the agent compiled from it.
    tested: dict[str, AgentDocument] = {}
    env_names = {name for name, _ in ctx.env}
    failed: dict[str, Path] = {}  # agents whose files have errors, by name
    reads: list[ReadSet] = []
    for path in resolved:
        col.files.add(path)
        kept = build.kept(path, ctx_key, checked)
        if kept is not None:
            agent, doc = _fresh_agent(kept), kept.doc
            col.files |= kept.files
            reads.append(kept.reads)
        else:
            try:
                doc = load_agent_file(path, display=str(display_path(path)), environ=build.environ)
            except PartialDocument as exc:
                col.diagnostics.extend(exc.diagnostics)
                col.diagnostics.extend(check_valid_parts(path, exc, ctx, build))
                name = exc.data.get("name") if isinstance(exc.data, dict) else None
                failed[name if isinstance(name, str) and name else path.stem] = path
                continue
            except ConfigError as exc:
                col.diagnostics.extend(exc.diagnostics)
                failed[path.stem] = path  # unreadable: its file name is the best guess
                continue
            agent_col = Collector()
            agent_col.schema_files = schema_files
            agent_col.resolutions = resolutions
            agent_col.prompt_files = prompt_files
            compiled = compile_agent(doc, ctx, agent_col, build)
            col.diagnostics.extend(agent_col.diagnostics)
            col.files |= agent_col.files
            col.lookups.update(agent_col.lookups)
            if compiled is None:
                failed[doc.spec.name] = path
                continue
            agent = compiled
            # The agent file as read: its text, and its stamp from the descriptor read.
            agent_col.stamps[str(path)] = doc.source.stamp
            files, settled = file_reads(
                {path, *agent_col.files},
                started_ns,
                checked.digests,
                {str(path): doc.source.text},
                agent_col.stamps,
            )
            lookups = tuple(sorted(agent_col.lookups.items()))
            own = ReadSet(files, lookups, env=_env_reads(doc.env_names, env))
            reads.append(own)
            # Unsettled: compiled again next time, as it may have changed unseen.
            if settled and build.keeps_agents:
                build.agents[path] = KeptAgent(
                    ctx_key,
                    doc,
                    agent,
                    frozenset(build.path(str(f)) for f in {path, *agent_col.files}),
                    own,
                    frozenset([*(read[0] for read in files), *agent_col.lookups]),
                    build.compiles,
                    any(kind.startswith(LINK) for kind in agent_col.lookups.values()),
                )
        if agent.name in agents:
            col.at(
                doc.source,
                ("name",),
                f"agent name '{agent.name}' is used by {display_path(agents[agent.name].path)} "
                "too; agent names must be unique in a project",
            )
            continue
        agents[agent.name] = agent
        env_names |= doc.env_names
        if doc.spec.tests:
            tested[agent.name] = doc
    _link_method_tools(agents, col, failed)
    tests: list[CompiledTest] = []
    for name, doc in tested.items():
        from .prompt_tests import compile_tests  # most agent files keep no tests

        tests += compile_tests(
            doc.spec.tests,
            agents[name],
            doc.source,
            ("tests",),
            doc.path,
            ctx,
            col,
            judge_model=ctx.judge_model,
        )
    for test_file in ctx.test_files:
        tests += _compile_test_file(test_file, agents, ctx, col, build.environ, env_names, failed)
    if col.diagnostics:
        raise ConfigError(col.diagnostics)
    program_reads = _program_reads(ctx, col, reads, env_names, env, started_ns)
    return Program(
        root=ctx.root,
        agents=agents,
        files=frozenset(col.files),
        version=program_reads.version(ctx.root),
        tests=tuple(tests),
        recordings=ctx.recordings,
        reads=program_reads,
    )


def _program_reads(
    ctx: ProjectContext,
    col: Collector,
    agents: list[ReadSet],
    env_names: Iterable[str],
    env: Mapping[str, str],
    started_ns: int,
) -> ReadSet:
    """What the whole compile read: each agent's reads, and the project's own (its file,
    test files, the lookups that found it, its patterns)."""
    known: dict[str, FileRead] = {read[0]: read for part in agents for read in part.files}
    rest = [f for f in col.files if str(f) not in known]
    files = (*known.values(), *file_reads(rest, started_ns)[0])
    project = ReadSet(
        files=tuple(sorted(files)),
        lookups=tuple(sorted(col.lookups.items())),
        globs=tuple((str(ctx.root), pattern, matched) for pattern, matched in ctx.globs),
        env=_env_reads(env_names, env),
        libraries=library_stamps(),
    )
    return project.merged(agents)


def _compile_test_file(
    path: Path,
    agents: Mapping[str, Agent],
    ctx: ProjectContext,
    col: Collector,
    environ: Mapping[str, str] | None,
    env_names: set[str],
    failed: Mapping[str, Path],
) -> list[CompiledTest]:
    col.files.add(path)
    try:
        spec, source, _, names = load_document(
            path, TestFileSpec, display=str(display_path(path)), environ=environ
        )
        env_names |= names
    except ConfigError as exc:
        col.diagnostics.extend(exc.diagnostics)
        return []
    agent = agents.get(spec.agent)
    if agent is None and spec.agent in failed:
        col.at(source, ("agent",), _failed_to_load(spec.agent, failed))
        return []
    if agent is None:
        col.at(
            source,
            ("agent",),
            f"no agent '{spec.agent}' in this project{did_you_mean(spec.agent, sorted(agents))}",
        )
        return []
    from .prompt_tests import compile_doubles, compile_tests

    doubles = compile_doubles(spec.tools, agent, source, ("tools",), col)
    return compile_tests(
        spec.tests,
        agent,
        source,
        ("tests",),
        path,
        ctx,
        col,
        file_doubles=doubles,
        file_live_tools=spec.live_tools,
        judge_model=spec.judge_model or ctx.judge_model,
        embed_model=spec.embed_model,
    )


def compile_path(
    path: Path, *, environ: Mapping[str, str] | None = None, build: Build | None = None
) -> Program:
    """Compile an agent file, a project folder, or a project's ``openprogram.yaml``.

    ``build``: see ``compile_agent_files``.
    """
    build = build or Build(environ, keeps_agents=False)
    started_ns = time.time_ns()
    if not path.exists():
        raise ConfigError(Diagnostic(str(path), 0, 0, "no such file or folder"))
    path = path.resolve()
    if path.is_dir() or path.name == PROJECT_FILE:
        folder = path if path.is_dir() else path.parent
        if not (folder / PROJECT_FILE).is_file():
            raise ConfigError(
                Diagnostic(
                    str(display_path(folder)),
                    0,
                    0,
                    f"no {PROJECT_FILE} in this folder; pass an agent file, or create "
                    f"{PROJECT_FILE} (version: 1, agents: [...]) to make it a project",
                )
            )
        return _compile_project(folder, build, started_ns)
    root, lookups = project_root_lookups(path)
    col = Collector()
    col.lookups.update((str(where), kind) for where, kind in lookups)
    if (root / PROJECT_FILE).is_file():
        return _compile_project(root, build, started_ns, extra=path, col=col)
    return _compile_agents([path], ProjectContext(root), col, build, started_ns)


def _compile_project(
    root: Path,
    build: Build,
    started_ns: int,
    extra: Path | None = None,
    col: Collector | None = None,
) -> Program:
    col = col or Collector()
    ctx, agent_files = load_project(root, col, build)
    if extra is not None and extra not in set(agent_files):
        agent_files.append(extra)
    if not agent_files and not col.diagnostics:
        pos = Diagnostic(
            str(display_path(root / PROJECT_FILE)), 1, 1, "the project holds no agents"
        )
        raise ConfigError(pos)
    return _compile_agents(agent_files, ctx, col, build, started_ns)
