"""Compile one agent document: its methods, templates, schemas, choices, tools and toolsets.

Problems are collected, not raised, so that one run reports every problem of every file;
``compile/project.py`` puts the agents of a project together into a ``Program``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import Diagnostic
from ..runtime.validation import SchemaValidator
from ..runtimes.rules import RuntimeRule
from ..spec.loader import AgentDocument, PartialDocument
from ..spec.models import AgentSpec, ExecOptionsSpec, MethodSpec
from ..spec.positions import TextOrigin
from ..spec.suggest import did_you_mean
from ..spec.textfile import UnreadableFile, read_text
from ..spec.yamlread import Loc, SourceMap
from .build import Build
from .context import Collector, ProjectContext
from .paths import display_path
from .program import (
    Agent,
    ChoiceOption,
    ExecOptions,
    HistoryLimit,
    Method,
    RetryPolicy,
    prompt_version,
)
from .rendering import CompiledTemplate
from .schemas import envelope_problems, split_envelope
from .templates import TemplateEngine
from .tools import build_tools
from .toolsets import check_tool_selection, compile_toolsets

__all__ = ["PendingMethodTools", "check_valid_parts", "compile_agent"]

_OPTION_FIELDS = tuple(ExecOptions.__dataclass_fields__)
#: The runtime's rule for choice names (``runtime.choices``, which this module does not
#: import: it brings asyncio): a pick names the choice, and a forced tool call carries it
#: as ``choose_<name>`` within the 64 characters providers allow tool names.
_CHOICE_NAME = re.compile(r"[A-Za-z0-9_-]{1,56}")


def _merge_options(defaults: ExecOptionsSpec, method: MethodSpec) -> ExecOptions:
    values = {}
    for name in _OPTION_FIELDS:
        if name not in _RUN_FIELDS:
            own = getattr(method, name)
            values[name] = own if own is not None else getattr(defaults, name)
    model: str | None = None
    fallbacks: tuple[str, ...] = ()
    for layer in (defaults, method):  # the inner layer wins
        if layer.model is not None:
            # A layer naming its model names its fallbacks too (none, unless it lists some).
            model, fallbacks = model_chain(layer.model, layer.fallback_models)
        elif layer.fallback_models is not None:
            fallbacks = tuple(layer.fallback_models)
    values.update(
        model=model,
        fallback_models=fallbacks,
        max_cost_usd=None if method.budget is None else method.budget.max_cost_usd,
    )
    return ExecOptions(**values)


#: Options merged by ``_merge_options`` itself rather than field by field.
_RUN_FIELDS = frozenset({"model", "fallback_models", "max_cost_usd"})


def model_chain(
    model: str | list[str] | None, fallback_models: list[str] | None
) -> tuple[str | None, tuple[str, ...]]:
    """``model: [a, b]`` or ``model: a`` with ``fallback_models: [b]`` → ``("a", ("b",))``."""
    if isinstance(model, list):
        return model[0], tuple(model[1:])
    return model, tuple(fallback_models or ())


def _template(
    engine: TemplateEngine,
    col: Collector,
    path: Path,
    source: SourceMap,
    *,
    inline: str | None,
    file_ref: str | None,
    loc: Loc,
    declared: Iterable[str],
    name: str,
    ctx: ProjectContext,
    declared_by: str = "the method",
) -> CompiledTemplate | None:
    """Compile an inline template or one read from a file; report problems to ``col``."""
    if file_ref is not None:
        file_loc = (*loc[:-1], f"{loc[-1]}_file")
        target, problem = col.resolutions.resolve_inside(path, file_ref, ctx.root, col.lookups)
        if target is None:
            col.at(source, file_loc, str(problem))
            return None
        # Read once in a compile while its stamp holds (taken before reading, as the
        # template engine does): a file replaced meanwhile by one with an older stamp
        # (rsync -a, cp -p, tar) is read again, or this agent's read-set, taken from the
        # file as it is now, would vouch for a text it was not built from.
        stamp = col.stamp(target)
        known = col.prompt_files.get(target)
        if known is None or stamp is None or known[2] != stamp:
            shown = str(display_path(target))
            try:
                text = read_text(target, shown)
            except UnreadableFile as exc:
                if exc.inside:
                    col.files.add(target)
                    col.diagnostics.extend(exc.diagnostics)
                else:
                    col.at(source, file_loc, f"'{file_ref}': {exc.reason} ({target})")
                return None
            if stamp is not None:
                col.prompt_files[target] = (shown, text, stamp)
        else:
            shown, text, _ = known
        col.files.add(target)
        origin = TextOrigin(shown, 1, 1, "file")
        real_path = target
    else:
        assert inline is not None
        origin = source.origin(loc)
        text = inline
        real_path = path
    return col.template(engine, text, origin, declared, name, declared_by, real_path)


def _response_format(
    col: Collector,
    path: Path,
    source: SourceMap,
    method: MethodSpec,
    loc: Loc,
    ctx: ProjectContext,
    max_validation_retries: int | None,
) -> tuple[dict[str, Any] | None, bool]:
    if method.response_schema is None:
        if method.fallback is not None:
            col.at(source, (*loc, "fallback"), "'fallback' applies to 'response_schema'; set one")
            return None, False
        return None, True
    fallback_loc = (*loc, "fallback")
    loc = (*loc, "response_schema")
    schema, options, is_envelope = split_envelope(method.response_schema)
    schema_loc = (*loc, "schema") if is_envelope else loc
    ok = True
    for key, problem in envelope_problems(options):
        col.at(source, (*loc, key), problem)
        ok = False
    if method.fallback is not None:
        if options.get("fallback", method.fallback) != method.fallback:
            col.at(source, fallback_loc, "'fallback' disagrees with response_schema's 'fallback'")
            ok = False
        options["fallback"] = method.fallback
    bundled, valid = col.schema(schema, ctx=ctx, base_file=path, source=source, loc=schema_loc)
    if not valid:
        return None, False
    envelope: dict[str, Any] = {"schema": bundled, **options}
    if "max_validation_retries" not in envelope and max_validation_retries is not None:
        envelope["max_validation_retries"] = max_validation_retries
    return envelope, ok


def _input_defs(
    col: Collector, doc: AgentDocument, loc: Loc, properties: dict[str, Any]
) -> dict[str, Any]:
    defs: dict[str, Any] = {}
    owners: dict[str, str] = {}
    for input_name, schema in properties.items():
        found = schema.get("$defs") if isinstance(schema, dict) else None
        for def_name, sub in (found if isinstance(found, dict) else {}).items():
            if def_name in defs and defs[def_name] != sub:
                col.at(
                    doc.source,
                    (*loc, "inputs", input_name, "$defs", def_name),
                    f"input '{owners[def_name]}' defines '{def_name}' differently; the "
                    "inputs share one '$defs', so give one of them another name",
                    key=True,
                )
                continue
            defs[def_name], owners[def_name] = sub, input_name
    return defs


def _compile_method(
    engine: TemplateEngine,
    col: Collector,
    doc: AgentDocument,
    name: str,
    method: MethodSpec,
    instructions: CompiledTemplate | None,
    ctx: ProjectContext,
    linked: dict[str, Method],
) -> Method | None:
    spec = doc.spec
    loc: Loc = ("methods", name)
    ok = True
    properties: dict[str, Any] = {}
    for input_name, schema in method.inputs.items():
        bundled, valid = col.schema(
            schema, ctx=ctx, base_file=doc.path, source=doc.source, loc=(*loc, "inputs", input_name)
        )
        ok = ok and valid
        properties[input_name] = bundled
    required = [n for n, s in properties.items() if not (isinstance(s, dict) and "default" in s)]
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    # An input's "#/$defs/…" (its own, or hoisted from a $ref'd file) points at the root of
    # the schema holding it, which is now the object of all inputs: its definitions go there.
    defs = _input_defs(col, doc, loc, properties)
    if defs:
        input_schema["$defs"] = defs
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
        ctx=ctx,
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
    response_format, rf_ok = _response_format(
        col, doc.path, doc.source, method, loc, ctx, spec.retry.max_validation_retries
    )
    # Every part is checked, so that one problem does not hide the next.
    choices = _choices(col, doc.path, doc.source, spec.name, spec.methods, name, method, ctx)
    tools_ok = check_tool_selection(col, doc, name, method, {**ctx.toolsets, **spec.toolsets})
    if prompt is None or not ok or not rf_ok or choices is None or not tools_ok:
        return None
    options = _merge_options(spec.defaults, method)
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
        options=options,
        variables=dict(spec.vars),
        toolset=method.toolset,
        tools_allow=tuple(method.tools_allow) if method.tools_allow is not None else None,
        tools_deny=tuple(method.tools_deny) if method.tools_deny else None,
        choices=choices or None,
        linked=linked,
        _prompt_hash=functools.partial(
            prompt_version, (prompt, instructions), response_format, choices, options, spec.vars
        ),
        secrets=frozenset(doc.secrets),
        history=None
        if method.history is None
        else HistoryLimit(method.history.max_messages, method.history.max_tokens),
    )


def _choices(
    col: Collector,
    path: Path,
    source: SourceMap,
    agent: str,
    methods: Collection[str],
    name: str,
    method: MethodSpec,
    ctx: ProjectContext,
) -> tuple[ChoiceOption, ...] | None:
    """The method's choices, checked: names, targets among ``methods`` (those the agent
    file declares), schemas. None on errors."""
    if not method.choices:
        return ()
    ok = True
    options = []
    known = sorted(methods)
    for option_name, option in method.choices.items():
        loc: Loc = ("methods", name, "choices", option_name)
        if not _CHOICE_NAME.fullmatch(option_name):
            col.at(
                source,
                loc,
                f"choice name {option_name!r} cannot be picked: a choice name is 1 to 56 "
                "letters, digits, '_' or '-'",
                key=True,
            )
            ok = False
        if option.method is not None and option.method not in methods:
            col.at(
                source,
                (*loc, "method"),
                f"choice '{option_name}' continues with method '{option.method}', which "
                f"agent '{agent}' does not have{did_you_mean(option.method, known)}",
            )
            ok = False
        schema = option.schema_
        if schema is not None:
            schema, valid = col.schema(
                schema, ctx=ctx, base_file=path, source=source, loc=(*loc, "schema")
            )
            ok = ok and valid
        options.append(
            ChoiceOption(option_name, option.description, option.value, option.method, schema)
        )
    return tuple(options) if ok else None


def compile_agent(
    doc: AgentDocument, ctx: ProjectContext, col: Collector, build: Build
) -> Agent | None:
    """The agent in ``doc``, or None when it has problems (reported to ``col``)."""
    spec = doc.spec
    engine = build.engine(ctx, doc.path)
    col.secrets = frozenset(doc.secrets)
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
            ctx=ctx,
            declared_by="the agent",
        )
    methods: dict[str, Method] = {}
    for name, method in spec.methods.items():
        compiled = _compile_method(engine, col, doc, name, method, instructions, ctx, methods)
        if compiled is not None:
            methods[name] = compiled
    toolsets = compile_toolsets(col, doc, ctx.toolsets)
    built = build_tools(engine, col, doc, ctx)
    if spec.ask_user and "ask_user" in spec.tools:
        col.at(
            doc.source,
            ("tools", "ask_user"),
            "'ask_user' is the built-in tool that 'ask_user: true' adds; rename this tool",
        )
    rules = tuple(RuntimeRule(r.match, r.runtime, dict(r.options)) for r in spec.runtimes)
    has_model = _check_model(col, doc)
    if len(methods) != len(spec.methods) or not has_model:
        return None
    model, fallback_models = model_chain(spec.model, spec.fallback_models)
    return Agent(
        name=spec.name,
        description=spec.description,
        path=doc.path,
        model=model,
        fallback_models=fallback_models,
        max_cost_usd=None if spec.budget is None else spec.budget.max_cost_usd,
        methods=methods,
        retry=RetryPolicy(
            spec.retry.max_retries, spec.retry.backoff_base_s, spec.retry.max_validation_retries
        ),
        runtime_rules=(*rules, *ctx.rules),
        providers=ctx.providers,
        secrets=frozenset(doc.secrets | ctx.secrets),
        files=frozenset({doc.path, *col.files}),
        tools=tuple(built.tools),
        tool_servers=tuple(built.servers),
        method_tools=PendingMethodTools(built.method_refs),
        toolsets=toolsets,
        ask_user=spec.ask_user,
    )


def _check_model(col: Collector, doc: AgentDocument) -> bool:
    """Whether every method has a model to run on; a run would refuse it otherwise."""
    spec = doc.spec
    if spec.model or spec.defaults.model or all(m.model for m in spec.methods.values()):
        return True
    given = ("model",) in doc.source.values
    col.at(
        doc.source,
        ("model",) if given else ("name",),
        f"agent '{spec.name}' has no model"
        + (" (the value is empty)" if given else "")
        + ": set 'model:' ('model: test' runs offline), or give each method a 'model:'",
    )
    return False


def check_valid_parts(
    path: Path, failed: PartialDocument, ctx: ProjectContext, build: Build
) -> list[Diagnostic]:
    """Problems in the parts that did validate, when the file as a whole did not.

    When only ``${env:…}`` variables were missing, the whole agent is compiled (problems at
    the values they left empty are not repeated); otherwise each method that validated is
    checked: its template, schemas and choices.
    """
    if isinstance(failed.spec, AgentSpec):
        col = Collector()
        col.secrets = failed.secrets
        doc = AgentDocument(path, failed.spec, failed.source, set(failed.secrets))
        compile_agent(doc, ctx, col, build)
        return [d for d in col.diagnostics if (d.line, d.col) not in failed.env_places]
    data = failed.data
    methods = data.get("methods") if isinstance(data, dict) else None
    if not isinstance(methods, dict):
        return []
    agent_vars = data.get("vars") if isinstance(data.get("vars"), dict) else {}
    col = Collector()
    col.secrets = failed.secrets
    engine = build.engine(ctx, path)
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
            ctx=ctx,
        )
        loc: Loc = ("methods", name)
        for input_name, schema in method.inputs.items():
            where = (*loc, "inputs", input_name)
            col.schema(schema, ctx=ctx, base_file=path, source=failed.source, loc=where)
        _response_format(col, path, failed.source, method, loc, ctx, None)
        agent = data.get("name") if isinstance(data.get("name"), str) else path.stem
        _choices(col, path, failed.source, agent, methods, name, method, ctx)
    return col.diagnostics


class PendingMethodTools(dict[str, Method]):
    """Tool name -> method, filled once every agent is compiled (tools may cross agents)."""

    def __init__(self, refs: Mapping[str, tuple[str, AgentDocument, Loc]]) -> None:
        super().__init__()
        self.refs = dict(refs)

    def __reduce__(self) -> tuple[type[dict[str, Method]], tuple[dict[str, Method]]]:
        # Pickled once linked (the compile cache keeps whole programs): the methods, as a
        # plain mapping; the references to the files they came from stay behind.
        return dict, (dict(self),)
