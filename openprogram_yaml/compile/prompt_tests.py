"""Tests kept beside prompts: checked at load time like everything else, run by the runner.

A test names a method, its inputs and expectations on the run, and may double tools (say
what they return or raise). Everything that can be known before a model is called is checked
here, at its position: the method exists, the inputs match its schema, regexes compile,
schemas are valid, JSON paths parse, the choice and the tools named exist, and a double's
`when` names only the tool's parameters.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..json_types import parse_json
from ..regex_safety import exponential_backtracking
from ..runtime.toolgate import ToolDouble
from ..runtime.validation import SchemaValidator
from ..spec.models import ExpectSpec, TestCaseSpec, ToolCallExpectSpec, ToolDoubleSpec
from ..spec.positions import Position
from ..spec.suggest import did_you_mean
from ..spec.textfile import UnreadableFile, read_text
from ..spec.yamlread import Loc, SourceMap
from .context import Collector, ProjectContext
from .paths import display_path
from .program import Agent

__all__ = [
    "CompiledTest",
    "Expectations",
    "ExpectedCall",
    "JsonPath",
    "Judge",
    "Similar",
    "ToolDoubles",
    "compile_doubles",
    "compile_tests",
    "parse_json_path",
]

#: Tool name -> its doubles, in the order they are tried.
ToolDoubles = Mapping[str, tuple[ToolDouble, ...]]

_SEGMENT = re.compile(r"\.([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+)\]|\[['\"]([^'\"]+)['\"]\]")

JsonPath = tuple[str | int, ...]


def parse_json_path(text: str) -> JsonPath | None:
    """``$.a.b[0]['c d']`` as ("a", "b", 0, "c d"); None when it does not parse."""
    if not text.startswith("$"):
        return None
    out: list[str | int] = []
    pos = 1
    while pos < len(text):
        match = _SEGMENT.match(text, pos)
        if match is None:
            return None
        name, index, quoted = match.groups()
        try:
            out.append(int(index) if index is not None else (name or quoted))
        except ValueError:  # an index of more digits than int() reads (4,300)
            return None
        pos = match.end()
    return tuple(out)


_MISSING = object()


def value_at(value: Any, path: JsonPath) -> Any:
    """The value at ``path``, or a sentinel (``MISSING``) when there is none."""
    for part in path:
        if isinstance(part, int) and isinstance(value, list) and -len(value) <= part < len(value):
            value = value[part]
        elif isinstance(part, str) and isinstance(value, dict) and part in value:
            value = value[part]
        else:
            return _MISSING
    return value


MISSING = _MISSING


@dataclass(frozen=True, slots=True)
class ExpectedCall:
    """A ``tools_called`` entry: a tool, and arguments its call must have had (None: any)."""

    name: str
    arguments: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Judge:
    """A ``judge`` expectation: a model grades the output against ``rubric`` (``run.evals``)."""

    rubric: str
    model: str | None
    pass_at: float


@dataclass(frozen=True, slots=True)
class Similar:
    """A ``similar`` expectation: the output's embedding is at least ``at_least`` (cosine)
    like that of ``to``."""

    to: str
    at_least: float
    model: str | None


@dataclass(frozen=True, slots=True)
class Expectations:
    """An ``expect:`` block, ready to check."""

    given: frozenset[str]
    equals: Any = None
    contains: tuple[str, ...] = ()
    not_contains: tuple[str, ...] = ()
    regex: re.Pattern[str] | None = None
    schema: SchemaValidator | None = None
    json_path: Mapping[str, tuple[JsonPath, Any]] = field(default_factory=dict)
    choice: str | None = None
    methods: tuple[str, ...] | None = None
    tools_called: tuple[ExpectedCall, ...] = ()
    tools_not_called: tuple[str, ...] = ()
    error: str | None = None
    judge: Judge | None = None
    similar: Similar | None = None
    #: The block as written (for reports).
    written: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CompiledTest:
    """One test case, checked and ready to run."""

    agent: str
    name: str
    method: str
    inputs: Mapping[str, Any]
    model: str | None
    expect: Expectations
    where: Position
    #: Run http and command tools for real under the offline ``test`` model.
    live_tools: bool = False
    #: What doubled tools answer (the test file's, with the case's own replacing them).
    doubles: ToolDoubles = field(default_factory=dict)
    #: The person's scripted answers, in the order asked (None: nobody is there to ask).
    answers: tuple[Any, ...] | None = None
    #: The test file's ``judge_model`` and ``embed_model`` (``run.evals`` picks the models).
    judge_model: str | None = None
    embed_model: str | None = None

    @property
    def id(self) -> str:
        return f"{self.agent}: {self.name}"


def _texts(value: str | list[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _expectations(
    spec: ExpectSpec,
    agent: Agent,
    method_name: str,
    col: Collector,
    source: SourceMap,
    loc: Loc,
    base_file: Path,
    ctx: ProjectContext,
) -> Expectations | None:
    before = len(col.diagnostics)
    regex = None
    if spec.regex is not None:
        try:
            regex = re.compile(spec.regex)
        except re.error as exc:
            col.at(source, (*loc, "regex"), f"invalid regular expression: {exc}")
        else:
            risk = exponential_backtracking(spec.regex)
            if risk is not None:
                # Searched in a model's output, it hung `openprogram-run test` (re has no
                # time limit): forty 'a' and a '!' against (a+)+$ take minutes.
                regex = None
                col.at(
                    source,
                    (*loc, "regex"),
                    f"regular expression {spec.regex!r} {risk.shape}: searching an output "
                    f"with it can take exponential time; {risk.fix}",
                )
    schema = None
    if spec.schema_ is not None:
        bundled, valid = col.schema(
            spec.schema_, ctx=ctx, base_file=base_file, source=source, loc=(*loc, "schema")
        )
        if valid:
            schema = SchemaValidator(bundled)
    paths: dict[str, tuple[JsonPath, Any]] = {}
    for text, expected in (spec.json_path or {}).items():
        parsed = parse_json_path(text)
        if parsed is None:
            col.at(
                source,
                (*loc, "json_path", text),
                f"'{text}' is not a JSON path; write e.g. '$.category' or '$.items[0].id'",
            )
        else:
            paths[text] = (parsed, expected)
    method = agent.methods.get(method_name)
    if spec.choice is not None and method is not None:
        options = [o.name for o in method.choices or ()]
        if spec.choice not in options:
            hint = did_you_mean(spec.choice, options) if options else ""
            what = f"its options: {', '.join(options)}" if options else "it has no choices"
            col.at(
                source,
                (*loc, "choice"),
                f"method '{method_name}' has no choice '{spec.choice}'{hint} ({what})",
            )
    for i, name in enumerate(spec.methods or ()):
        if name not in agent.methods:
            col.at(
                source,
                (*loc, "methods", i),
                f"agent '{agent.name}' has no method '{name}'"
                f"{did_you_mean(name, sorted(agent.methods))}",
            )
    tool_names = sorted(_tool_parameters(agent))
    called = [_expected_call(item) for item in spec.tools_called or ()]
    named: list[tuple[str, Loc]] = [
        (c.name, (*loc, "tools_called", i, *(() if isinstance(item, str) else ("name",))))
        for i, (c, item) in enumerate(zip(called, spec.tools_called or (), strict=True))
    ]
    named += [(n, (*loc, "tools_not_called", i)) for i, n in enumerate(spec.tools_not_called or ())]
    for name, at in named:
        if name not in tool_names and not _server_tool(agent, name):
            col.at(
                source,
                at,
                f"agent '{agent.name}' has no tool '{name}'{did_you_mean(name, tool_names)}",
            )
    if len(col.diagnostics) != before:
        return None
    given = {("schema" if f == "schema_" else f) for f in spec.model_fields_set}
    return Expectations(
        given=frozenset(given),
        equals=spec.equals,
        contains=_texts(spec.contains),
        not_contains=_texts(spec.not_contains),
        regex=regex,
        schema=schema,
        json_path=paths,
        choice=spec.choice,
        methods=tuple(spec.methods) if spec.methods is not None else None,
        tools_called=tuple(called),
        tools_not_called=tuple(spec.tools_not_called or ()),
        error=spec.error,
        judge=None
        if spec.judge is None
        else Judge(spec.judge.rubric, spec.judge.model, spec.judge.pass_at),
        similar=None
        if spec.similar is None
        else Similar(spec.similar.to, spec.similar.at_least, spec.similar.model),
        written=spec.model_dump(mode="json", exclude_unset=True, by_alias=True),
    )


def _expected_call(item: str | ToolCallExpectSpec) -> ExpectedCall:
    if isinstance(item, str):
        return ExpectedCall(item)
    return ExpectedCall(item.name, item.arguments)


def _tool_parameters(agent: Agent) -> dict[str, Mapping[str, Any]]:
    """Every tool of ``agent`` by name, with its parameters' JSON Schema."""
    found: dict[str, Mapping[str, Any]] = {t.spec.name: t.spec.parameters for t in agent.tools}
    for name, method in agent.method_tools.items():
        found[name] = method.input_schema
    return found


def _server_tool(agent: Agent, name: str) -> bool:
    """Whether ``name`` is a tool of one of the agent's MCP servers (their tools are known
    only once they run, so the name is taken on trust, its ``when`` unchecked)."""
    from ..tools.mcp import is_server_tool

    return is_server_tool(name, [server.name for server in agent.tool_servers])


def compile_doubles(
    specs: Mapping[str, Sequence[ToolDoubleSpec]],
    agent: Agent,
    source: SourceMap,
    loc: Loc,
    col: Collector,
) -> ToolDoubles:
    """The tool doubles at ``loc`` (a mapping of tool name to doubles), checked: each tool
    exists, and each ``when`` names only parameters the tool declares."""
    tools = _tool_parameters(agent)
    names = sorted(tools)
    out: dict[str, tuple[ToolDouble, ...]] = {}
    for name, doubles in specs.items():
        if name not in tools and not _server_tool(agent, name):
            col.at(
                source,
                (*loc, name),
                f"agent '{agent.name}' has no tool '{name}'{did_you_mean(name, names)}",
                key=True,
            )
            continue
        properties = tools.get(name, {}).get("properties")
        for i, double in enumerate(doubles):
            if double.when is None or not isinstance(properties, Mapping):
                continue
            for key in double.when:
                if key not in properties:
                    col.at(
                        source,
                        (*loc, name, i, "when", key),
                        f"tool '{name}' has no parameter '{key}'"
                        f"{did_you_mean(key, sorted(properties))}",
                        key=True,
                    )
        out[name] = tuple(ToolDouble(d.returns, d.raises, d.when) for d in doubles)
    return out


def _dataset_cases(
    case: TestCaseSpec,
    source: SourceMap,
    case_loc: Loc,
    base_file: Path,
    root: Path,
    col: Collector,
) -> list[tuple[TestCaseSpec, SourceMap, Loc]]:
    """The cases of ``case``'s dataset file (``cases:``), one a line, each with a source map
    that places any problem at its line (``FILE:LINE``).

    A line is a JSON object: the method's inputs, or ``{name, inputs, expect}`` (told apart
    by an ``inputs`` key that is an object). Its ``expect`` keys replace the test's. The
    file is one of the project's, as a prompt file is.
    """
    assert case.cases is not None
    path, problem = col.resolutions.resolve_inside(base_file, case.cases, root, col.lookups)
    if path is None:
        col.at(source, (*case_loc, "cases"), str(problem))
        return []
    col.files.add(path)
    shown = str(display_path(path))
    try:
        text = read_text(path, shown)
    except UnreadableFile as exc:
        if exc.inside:
            col.diagnostics.extend(exc.diagnostics)
        else:
            col.at(
                source, (*case_loc, "cases"), f"cannot read the cases file {shown}: {exc.reason}"
            )
        return []
    out: list[tuple[TestCaseSpec, SourceMap, Loc]] = []
    before = len(col.diagnostics)
    shared = case.expect.model_dump(exclude_unset=True, by_alias=True)
    # Lines end at "\n" alone (a "\r" before it is JSON whitespace): splitlines() also
    # broke a line at U+2028, U+2029 or U+0085, which a JSON string may hold raw (as
    # json.dumps(ensure_ascii=False) writes them), refusing good rows and shifting the
    # line numbers of every error after them.
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        where = SourceMap(shown, values={(): (number, 1)})
        try:
            row = parse_json(line)
        except ValueError as exc:
            col.at(where, (), f"not a JSON object: {exc}")
            continue
        if not isinstance(row, dict):
            col.at(where, (), "a case is a JSON object: the inputs, or {name, inputs, expect}")
            continue
        structured = isinstance(row.get("inputs"), dict)
        inputs = row["inputs"] if structured else row
        name = str(row.get("name") or f"line {number}") if structured else f"line {number}"
        expect: dict[str, Any] = dict(shared)
        if structured:
            unknown = sorted(set(row) - {"name", "inputs", "expect"})
            if unknown:
                col.at(
                    where,
                    (),
                    f"unknown key {unknown[0]!r} in a case (a case is the inputs, or "
                    "{name, inputs, expect})",
                )
                continue
            extra = row.get("expect") or {}
            if not isinstance(extra, dict):
                col.at(where, (), "'expect' must be an object")
                continue
            expect.update(extra)
        try:
            spec = ExpectSpec.model_validate(expect)
        except ValidationError as exc:
            for error in exc.errors():
                at = ".".join(str(part) for part in error["loc"])
                col.at(where, (), f"expect.{at}: {error['msg']}")
            continue
        out.append(
            (
                case.model_copy(
                    update={"name": f"{case.name} [{name}]", "inputs": inputs, "expect": spec}
                ),
                where,
                (),
            )
        )
    if not out and len(col.diagnostics) == before:
        col.at(source, (*case_loc, "cases"), f"the cases file {shown} holds no cases")
    return out


def compile_tests(
    cases: Sequence[TestCaseSpec],
    agent: Agent,
    source: SourceMap,
    loc: Loc,
    base_file: Path,
    ctx: ProjectContext,
    col: Collector,
    *,
    file_doubles: ToolDoubles | None = None,
    file_live_tools: bool = False,
    judge_model: str | None = None,
    embed_model: str | None = None,
) -> list[CompiledTest]:
    """The test cases at ``loc`` of ``source`` (a list), checked against ``agent``.

    ``file_doubles``, ``file_live_tools``, ``judge_model`` and ``embed_model`` are the test
    file's; a case's own win. A case with ``cases:`` is one test a line of its dataset.
    """
    out: list[CompiledTest] = []
    names: dict[str, int] = {}
    for i, listed in enumerate(cases):
        listed_loc: Loc = (*loc, i)
        if listed.name in names:
            col.at(
                source,
                (*listed_loc, "name"),
                f"two tests of agent '{agent.name}' are named '{listed.name}' "
                f"(the other is test {names[listed.name] + 1}); names must be unique",
            )
        names.setdefault(listed.name, i)
        expanded = (
            [(listed, source, listed_loc)]
            if listed.cases is None
            else _dataset_cases(listed, source, listed_loc, base_file, ctx.root, col)
        )
        for case, case_source, case_loc in expanded:
            test = _compile_case(
                case,
                agent,
                case_source,
                case_loc,
                base_file,
                ctx,
                col,
                file_doubles=file_doubles,
                file_live_tools=file_live_tools,
            )
            if test is not None:
                out.append(
                    dataclasses.replace(test, judge_model=judge_model, embed_model=embed_model)
                )
    return out


def _compile_case(
    case: TestCaseSpec,
    agent: Agent,
    source: SourceMap,
    case_loc: Loc,
    base_file: Path,
    ctx: ProjectContext,
    col: Collector,
    *,
    file_doubles: ToolDoubles | None,
    file_live_tools: bool,
) -> CompiledTest | None:
    before = len(col.diagnostics)
    method = agent.methods.get(case.method)
    if method is None:
        col.at(
            source,
            (*case_loc, "method"),
            f"agent '{agent.name}' has no method '{case.method}'"
            f"{did_you_mean(case.method, sorted(agent.methods))}",
        )
    else:
        unknown = [k for k in case.inputs if k not in method.inputs]
        for key in unknown:
            col.at(
                source,
                (*case_loc, "inputs", key),
                f"method '{case.method}' has no input '{key}'"
                f"{did_you_mean(key, sorted(method.inputs))}",
                key=True,
            )
        # A test that expects an error may hand the method invalid inputs on purpose:
        # the run refuses them, and the test checks the message.
        if not unknown and case.expect.error is None:
            values = dict(case.inputs)
            for name, schema in method.inputs.items():
                if name not in values and isinstance(schema, dict) and "default" in schema:
                    values[name] = schema["default"]
            for issue in method.input_validator.errors(values):
                col.at(source, (*case_loc, "inputs"), f"inputs do not match: {issue}")
    expect = _expectations(
        case.expect, agent, case.method, col, source, (*case_loc, "expect"), base_file, ctx
    )
    doubles = compile_doubles(case.tools, agent, source, (*case_loc, "tools"), col)
    if expect is None or len(col.diagnostics) != before:
        return None
    return CompiledTest(
        agent=agent.name,
        name=case.name,
        method=case.method,
        inputs=dict(case.inputs),
        model=case.model,
        expect=expect,
        where=source.at((*case_loc, "name")),
        live_tools=file_live_tools if case.live_tools is None else case.live_tools,
        doubles={**(file_doubles or {}), **doubles},
        answers=None if case.answers is None else tuple(case.answers),
    )
