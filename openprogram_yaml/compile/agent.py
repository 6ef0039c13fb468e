"""Compile agent files into a ``Program``: templates, schemas, options, runtime rules.

Every problem of every file is collected and raised together as one ``ConfigError``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError, Diagnostic
from ..runtime.validation import SchemaValidator
from ..spec.loader import AgentDocument, PartialDocument, load_agent_file
from ..spec.models import AgentSpec, ExecOptionsSpec, MethodSpec
from ..spec.positions import TextOrigin
from ..spec.yamlread import Loc, SourceMap
from .paths import find_project_root, resolve_inside
from .program import Agent, ExecOptions, Method, Program, RetryPolicy, RuntimeRule
from .schemas import bundle_schema, envelope_problems, split_envelope
from .templates import CompiledTemplate, TemplateEngine

__all__ = ["compile_agent_files", "compile_path"]

_OPTION_FIELDS = tuple(ExecOptions.__dataclass_fields__)


class _Collector:
    def __init__(self) -> None:
        self.diagnostics: list[Diagnostic] = []
        self.files: set[Path] = set()

    def at(self, source: SourceMap, loc: Loc, message: str, *, key: bool = False) -> None:
        pos = source.at(loc, key=key)
        self.diagnostics.append(Diagnostic(pos.path, pos.line, pos.col, message))


def _merge_options(defaults: ExecOptionsSpec, method: MethodSpec) -> ExecOptions:
    values = {}
    for name in _OPTION_FIELDS:
        own = getattr(method, name)
        values[name] = own if own is not None else getattr(defaults, name)
    return ExecOptions(**values)


def _template(
    engine: TemplateEngine,
    col: _Collector,
    path: Path,
    source: SourceMap,
    *,
    inline: str | None,
    file_ref: str | None,
    loc: Loc,
    declared: Iterable[str],
    name: str,
    root: Path,
    declared_by: str = "the method",
) -> CompiledTemplate | None:
    """Compile an inline template or one read from a file; report problems to ``col``."""
    if file_ref is not None:
        file_loc = (*loc[:-1], f"{loc[-1]}_file")
        target, problem = resolve_inside(path, file_ref, root)
        if target is None:
            col.at(source, file_loc, str(problem))
            return None
        if not target.is_file():
            col.at(source, file_loc, f"'{file_ref}': no such file ({target})")
            return None
        col.files.add(target)
        try:
            text = target.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            col.at(source, file_loc, f"cannot read '{file_ref}': {exc}")
            return None
        origin = TextOrigin(str(_display(target)), 1, 1, "file")
    else:
        assert inline is not None
        origin = source.origin(loc)
        text = inline
    try:
        compiled = engine.compile(
            text, origin=origin, declared=frozenset(declared), name=name, declared_by=declared_by
        )
    except ConfigError as exc:
        col.diagnostics.extend(exc.diagnostics)
        return None
    col.files.update(compiled.files)
    return compiled


def _display(path: Path) -> Path:
    """A path as users see it: relative to the working directory when it is inside it."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def _response_format(
    col: _Collector, doc: AgentDocument, method: MethodSpec, loc: Loc, spec: AgentSpec, root: Path
) -> tuple[dict[str, Any] | None, bool]:
    if method.response_schema is None:
        return None, True
    loc = (*loc, "response_schema")
    schema, options, is_envelope = split_envelope(method.response_schema)
    schema_loc = (*loc, "schema") if is_envelope else loc
    ok = True
    for key, problem in envelope_problems(options):
        col.at(doc.source, (*loc, key), problem)
        ok = False
    bundle = bundle_schema(schema, base_file=doc.path, root=root, source=doc.source, loc=schema_loc)
    col.files.update(bundle.files)
    if bundle.diagnostics:
        col.diagnostics.extend(bundle.diagnostics)
        return None, False
    envelope: dict[str, Any] = {"schema": bundle.schema, **options}
    if "max_validation_retries" not in envelope and spec.retry.max_validation_retries is not None:
        envelope["max_validation_retries"] = spec.retry.max_validation_retries
    return envelope, ok


def _compile_method(
    engine: TemplateEngine,
    col: _Collector,
    doc: AgentDocument,
    name: str,
    method: MethodSpec,
    instructions: CompiledTemplate | None,
    root: Path,
) -> Method | None:
    spec = doc.spec
    loc: Loc = ("methods", name)
    ok = True
    properties: dict[str, Any] = {}
    for input_name, schema in method.inputs.items():
        bundle = bundle_schema(
            schema,
            base_file=doc.path,
            root=root,
            source=doc.source,
            loc=(*loc, "inputs", input_name),
        )
        col.files.update(bundle.files)
        if bundle.diagnostics:
            col.diagnostics.extend(bundle.diagnostics)
            ok = False
        properties[input_name] = bundle.schema
    required = [n for n, s in properties.items() if not (isinstance(s, dict) and "default" in s)]
    input_schema = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    declared = set(spec.vars) | set(method.inputs)
    prompt = _template(
        engine,
        col,
        doc.path,
        doc.source,
        inline=method.prompt,
        file_ref=method.prompt_file,
        loc=(*loc, "prompt"),
        declared=declared,
        name=f"{spec.name}.{name}.prompt",
        root=root,
    )
    if instructions is not None:
        missing = sorted(instructions.variables - declared)
        if missing:
            key = "instructions_file" if spec.instructions_file else "instructions"
            col.at(
                doc.source,
                (key,),
                f"the instructions read {', '.join(repr(m) for m in missing)}, which method "
                f"'{name}' does not declare in 'inputs' (add them to its inputs or to 'vars')",
            )
            ok = False
    response_format, rf_ok = _response_format(col, doc, method, loc, spec, root)
    if prompt is None or not ok or not rf_ok:
        return None
    return Method(
        agent=spec.name,
        name=name,
        description=method.description,
        inputs=properties,
        input_schema=input_schema,
        input_validator=SchemaValidator(input_schema),
        prompt=prompt,
        instructions=instructions,
        response_format=response_format,
        options=_merge_options(spec.defaults, method),
        variables=dict(spec.vars),
    )


def _compile_agent(doc: AgentDocument, root: Path, col: _Collector) -> Agent | None:
    spec = doc.spec
    engine = TemplateEngine(root, search_paths=[doc.path.parent])
    all_inputs: set[str] = set()
    for method in spec.methods.values():
        all_inputs |= set(method.inputs)
    instructions: CompiledTemplate | None = None
    if spec.instructions is not None or spec.instructions_file is not None:
        # Checked against each method below; here any input some method has is allowed.
        instructions = _template(
            engine,
            col,
            doc.path,
            doc.source,
            inline=spec.instructions,
            file_ref=spec.instructions_file,
            loc=("instructions",),
            declared=set(spec.vars) | all_inputs,
            name=f"{spec.name}.instructions",
            root=root,
            declared_by="the agent",
        )
    methods: dict[str, Method] = {}
    for name, method in spec.methods.items():
        compiled = _compile_method(engine, col, doc, name, method, instructions, root)
        if compiled is not None:
            methods[name] = compiled
    rules = tuple(RuntimeRule(r.match, r.runtime, dict(r.options)) for r in spec.runtimes)
    if len(methods) != len(spec.methods):
        return None
    return Agent(
        name=spec.name,
        description=spec.description,
        path=doc.path,
        model=spec.model,
        methods=methods,
        retry=RetryPolicy(
            spec.retry.max_retries, spec.retry.backoff_base_s, spec.retry.max_validation_retries
        ),
        runtime_rules=rules,
        secrets=frozenset(doc.secrets),
        files=frozenset({doc.path, *col.files}),
    )


def _check_valid_parts(path: Path, failed: PartialDocument, root: Path) -> list[Diagnostic]:
    """Template problems in the methods that did validate, when the file as a whole did not."""
    from pydantic import ValidationError

    data = failed.data
    methods = data.get("methods") if isinstance(data, dict) else None
    if not isinstance(methods, dict):
        return []
    agent_vars = data.get("vars") if isinstance(data.get("vars"), dict) else {}
    col = _Collector()
    engine = TemplateEngine(root, search_paths=[path.parent])
    for name, raw in methods.items():
        try:
            method = MethodSpec.model_validate(raw)
        except ValidationError:
            continue  # its problems are already reported
        _template(
            engine,
            col,
            path,
            failed.source,
            inline=method.prompt,
            file_ref=method.prompt_file,
            loc=("methods", name, "prompt"),
            declared=set(agent_vars) | set(method.inputs),
            name=f"{name}.prompt",
            root=root,
        )
    return col.diagnostics


def _version(files: Iterable[Path], root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(files):
        try:
            rel = path.relative_to(root).as_posix()
        except ValueError:
            rel = path.as_posix()
        digest.update(rel.encode() + b"\0")
        try:
            digest.update(path.read_bytes())
        except OSError:
            digest.update(b"<unreadable>")
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def compile_agent_files(
    paths: Iterable[Path], *, environ: Mapping[str, str] | None = None, root: Path | None = None
) -> Program:
    """Load, validate and compile agent files into one ``Program``.

    Raises ``ConfigError`` with every problem of every file.
    """
    col = _Collector()
    agents: dict[str, Agent] = {}
    all_files: set[Path] = set()
    resolved = [p.resolve() for p in paths]
    project = root or (find_project_root(resolved[0]) if resolved else Path.cwd())
    for path in resolved:
        all_files.add(path)
        try:
            doc = load_agent_file(path, display=str(_display(path)), environ=environ)
        except PartialDocument as exc:
            col.diagnostics.extend(exc.diagnostics)
            col.diagnostics.extend(_check_valid_parts(path, exc, project))
            continue
        except ConfigError as exc:
            col.diagnostics.extend(exc.diagnostics)
            continue
        agent_col = _Collector()
        agent = _compile_agent(doc, project, agent_col)
        col.diagnostics.extend(agent_col.diagnostics)
        all_files |= agent_col.files
        if agent is None:
            continue
        if agent.name in agents:
            col.at(
                doc.source,
                ("name",),
                f"agent name '{agent.name}' is used by {agents[agent.name].path} too",
            )
            continue
        agents[agent.name] = agent
    if col.diagnostics:
        raise ConfigError(col.diagnostics)
    return Program(
        root=project,
        agents=agents,
        files=frozenset(all_files),
        version=_version(all_files, project),
    )


def compile_path(path: Path, *, environ: Mapping[str, str] | None = None) -> Program:
    """Compile an agent file (the one entry point the runner uses for a single file)."""
    if not path.exists():
        raise ConfigError(Diagnostic(str(path), 0, 0, "no such file or folder"))
    if path.is_dir():
        files = sorted(p for p in path.glob("*.yaml") if p.name != "openprogram.yaml")
        files += sorted(path.glob("*.yml"))
        if not files:
            raise ConfigError(Diagnostic(str(path), 0, 0, "no agent files (*.yaml) in this folder"))
        return compile_agent_files(files, environ=environ)
    return compile_agent_files([path], environ=environ)
