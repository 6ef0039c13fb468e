"""The compiled, immutable objects a run uses: ``Program`` → ``Agent`` → ``Method``."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import reprlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import MAX_ISSUES, InputValidationError, UsageError
from ..json_types import JSONObject, JSONValue, holds_text_only, is_text
from ..redaction import redact
from ..runtime.content import MediaError, media_block, media_types, media_value
from ..runtime.validation import SchemaValidator
from ..spec.suggest import did_you_mean
from .readset import ReadSet

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from ..runtime import ToolsetPreset
    from ..runtimes.rules import ProviderConfig, RuntimeRule
    from .prompt_tests import CompiledTest
    from .rendering import CompiledTemplate

__all__ = [
    "Agent",
    "ChoiceOption",
    "ExecOptions",
    "HistoryLimit",
    "Method",
    "Program",
    "RetryPolicy",
    "unfit_input",
]


#: Unknown inputs named one by one in an error (the last of its ``MAX_ISSUES`` counts the
#: rest): a client may send a million, and each named is looked up for a "did you mean".
_NAMED_UNKNOWN = MAX_ISSUES - 1
#: What a file input renders as in a template: cut out again into its content block.
_FILE_MARK = "\ue000file:"
_FILE_END = "\ue001"
_FILE_SPLIT = re.compile(f"({_FILE_MARK}\\d+{_FILE_END})")
#: The input schema of a method that declares no inputs (``compile.agent``).
_NO_INPUTS_SCHEMA: Mapping[str, JSONValue] = {
    "type": "object",
    "properties": {},
    "required": [],
    "additionalProperties": False,
}


@dataclass(frozen=True, slots=True)
class ExecOptions:
    """Call options after ``defaults`` and the method's own settings are merged."""

    model: str | None = None
    timeout_s: float | None = None
    max_iterations: int | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    tool_choice: str | None = None
    parallel_tool_calls: bool | None = None
    thinking_level: str | None = None
    max_steps: int | None = None
    #: Models tried in turn when ``model`` fails for good (``run.fallback``).
    fallback_models: tuple[str, ...] = ()
    #: The method's ``budget: {max_cost_usd}`` (None: the agent's, if any).
    max_cost_usd: float | None = None


@dataclass(frozen=True, slots=True)
class HistoryLimit:
    """How much of a chat session's conversation a method is sent (``history:``)."""

    max_messages: int | None = None
    max_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class ChoiceOption:
    """One ``choices`` option: a value, a method to continue with, or a schema of fields."""

    name: str
    description: str | None = None
    value: JSONValue = None
    method: str | None = None
    schema: Mapping[str, JSONValue] | None = None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """The agent's retry settings; ``None`` leaves the Runtime's environment defaults."""

    max_retries: int | None = None
    backoff_base_s: float | None = None
    max_validation_retries: int | None = None


def _repr_hiding(obj: DataclassInstance, secrets: Iterable[str]) -> str:
    """The dataclass repr of ``obj`` with every one of ``secrets`` replaced by ``***``: any
    text of an agent file (a prompt, a var, a default) may hold a value read from the
    environment."""
    shown = ", ".join(
        f"{f.name}={getattr(obj, f.name)!r}" for f in dataclasses.fields(obj) if f.repr
    )
    return redact(f"{type(obj).__qualname__}({shown})", secrets)


def unfit_input(value: JSONValue, where: str) -> str | None:
    """What in an input no record, request or reply can carry, or None: a string holding a
    lone surrogate (JSON's "\\ud800", or a byte that is not UTF-8 on a command line, which
    Python keeps so), which every UTF-8 write of it raised on (a record, a trace: a
    traceback after the run); or NaN, an infinity or 1e999, which JSON has no number for.

    Every run's inputs pass here: a loop over a stack (no depth is too deep), and the path
    of a value (``where.key[3]``) is spelled only for the one found unfit (a list of
    100,000 numbers spelled as many paths, 24 ms a run)."""
    if isinstance(value, str):  # most inputs: no walk
        return None if is_text(value) else _unfit_text(value, where)
    if holds_text_only(value, finite=True):
        return None
    stack: list[tuple[object, str | None, object]] = [(value, None, None)]
    while stack:
        item, parent, step = stack.pop()
        if isinstance(item, str):
            if not is_text(item):
                return _unfit_text(item, _path(where, parent, step))
        elif isinstance(item, float):
            if not math.isfinite(item):
                return f"{_path(where, parent, step)}: {item} is not a JSON number"
        elif isinstance(item, dict | list):
            here = _path(where, parent, step)
            if isinstance(item, dict):
                for key in item:
                    if isinstance(key, str) and not is_text(key):
                        return _unfit_text(key, f"{here} (a key)")
                # Reversed: the first member is looked at first, as it is named first.
                stack.extend((member, here, key) for key, member in reversed(item.items()))
            else:
                stack.extend((item[i], here, i) for i in range(len(item) - 1, -1, -1))
    return None  # (not reached: holds_text_only found something)


def _path(where: str, parent: str | None, step: object) -> str:
    if parent is None:
        return where
    return f"{parent}[{step}]" if isinstance(step, int) else f"{parent}.{step}"


def _unfit_text(text: str, where: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        position = exc.start + 1
    else:  # (not reached: only text that is not is passed)
        position = 0
    return (
        f"{where}: text that is not valid Unicode (character {position} is a "
        "lone surrogate: a byte that is not UTF-8, or half of a UTF-16 pair)"
    )


def _shown_name(name: str) -> str:
    """A name a caller gave, quoted, and cut short when it is long."""
    return repr(name) if len(name) <= 80 else repr(name[:77] + "...")


def prompt_version(
    templates: Iterable[CompiledTemplate | None],
    response_format: Mapping[str, JSONValue] | None,
    choices: Iterable[ChoiceOption],
    options: ExecOptions,
    variables: Mapping[str, JSONValue],
) -> str:
    """A short hash of what shapes a method's requests, stable across runs and machines.

    Here, beside ``Method``, and not with the compiler: a compiled program that is loaded
    from the compile cache must not need the compiler to work out its versions.
    """
    digest = hashlib.sha256()
    for template in templates:
        if template is None:
            digest.update(b"-\0")
            continue
        digest.update(template.source.encode() + b"\0")
        for path in sorted(template.files):
            try:
                digest.update(path.read_bytes() + b"\0")
            except OSError:
                digest.update(b"?\0")
    shaping = dataclasses.asdict(options)
    # A budget never shapes a request; fallbacks do only when there are some (so adding
    # these fields changed no version).
    del shaping["max_cost_usd"]
    if not shaping["fallback_models"]:
        del shaping["fallback_models"]
    rest = [response_format, [dataclasses.asdict(c) for c in choices], shaping, variables]
    digest.update(json.dumps(rest, sort_keys=True, default=_plain).encode())
    return digest.hexdigest()[:12]


def _plain(value: object) -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return repr(value)


@dataclass(frozen=True, repr=False, slots=True)
class Method:
    """A method ready to run: inputs checked, prompt rendered, options merged."""

    agent: str
    name: str
    description: str | None
    inputs: Mapping[str, JSONValue]
    input_schema: Mapping[str, JSONValue]
    input_validator: SchemaValidator
    prompt: CompiledTemplate
    instructions: CompiledTemplate | None
    response_format: Mapping[str, JSONValue] | None
    options: ExecOptions
    variables: Mapping[str, JSONValue] = field(default_factory=dict)
    toolset: str | None = None
    tools_allow: tuple[str, ...] | None = None
    tools_deny: tuple[str, ...] | None = None
    choices: tuple[ChoiceOption, ...] | None = None
    #: Methods this one's choices continue with, by name (filled when the agent is linked).
    linked: Mapping[str, Method] = field(default_factory=dict)
    _prompt_hash: Callable[[], str] = field(default=lambda: "", repr=False)
    _prompt_hashed: list[str] = field(default_factory=list, repr=False)
    #: The secrets its agent's file read, kept out of its repr.
    secrets: frozenset[str] = field(default=frozenset(), repr=False, compare=False)
    #: How much of a chat session it is sent (None: all of it).
    history: HistoryLimit | None = None
    #: ``_file_inputs`` once worked out (every run asks twice: its inputs and its render).
    _files_found: list[tuple[tuple[str, tuple[str, ...]], ...]] = field(
        default_factory=list, init=False, repr=False, compare=False
    )

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        return _repr_hiding(self, self.secrets)

    @property
    def prompt_version(self) -> str:
        """A hash of everything that shapes what this method sends: templates (with the
        files they include), response format, choices and options. Runs and traces name it.
        Worked out when first asked for (a run, a lock file), not at every load."""
        if not self._prompt_hashed:
            self._prompt_hashed.append(self._prompt_hash())
        return self._prompt_hashed[0]

    def prepare_templates(self) -> None:
        """Generate the code of this method's templates now instead of at their first
        render (the command line does it before a run, as part of start-up)."""
        for template in (self.instructions, self.prompt):
            if template is not None:
                template.prepare()

    def prepare_inputs(self, given: Mapping[str, JSONValue]) -> JSONObject:
        """The inputs with defaults applied, checked against the declared schema.

        Raises ``InputValidationError`` (exit 2) naming every problem.
        """
        unknown = [k for k in given if k not in self.inputs]
        if unknown:
            names = sorted(self.inputs)
            problems = [
                f"unknown input {_shown_name(k)}{did_you_mean(k, names)}"
                for k in unknown[:_NAMED_UNKNOWN]
            ]
            if len(unknown) > _NAMED_UNKNOWN:
                problems.append(f"and {len(unknown) - _NAMED_UNKNOWN:,} more unknown inputs")
            declared = ", ".join(names) if names else "none"
            raise InputValidationError(
                f"method '{self.name}' of agent '{self.agent}' got unknown inputs "
                f"(it declares: {declared})",
                problems,
            )
        unfit = [problem for name, value in given.items() if (problem := unfit_input(value, name))]
        if unfit:
            raise InputValidationError(
                f"inputs of method '{self.name}' of agent '{self.agent}' are not JSON text; "
                "give UTF-8 text and finite numbers",
                unfit,
            )
        values = dict(given)
        for name, schema in self.inputs.items():
            if name not in values and isinstance(schema, dict) and "default" in schema:
                values[name] = schema["default"]
        unusable: list[str] = []
        for name, accepted in self._file_inputs():
            if name in values:
                try:
                    values[name] = media_value(values[name], accepted, f"input '{name}'")
                except MediaError as exc:
                    unusable.append(str(exc))
        if unusable:
            raise InputValidationError(
                f"file inputs of method '{self.name}' of agent '{self.agent}' cannot be used; "
                "pass a file with -i NAME=@PATH, or a data URL (data:TYPE;base64,DATA)",
                unusable,
            )
        # A method that declares no inputs has the schema of no properties, which no inputs
        # pass without a check (nor the import of the validator it would take).
        issues = (
            []
            if not values and self.input_schema == _NO_INPUTS_SCHEMA
            else self.input_validator.errors(values)
        )
        if issues:
            raise InputValidationError(
                f"inputs of method '{self.name}' of agent '{self.agent}' do not match its "
                "'inputs' schema; pass them with -i NAME=VALUE or --input-json",
                issues,
            )
        return values

    def _file_inputs(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The inputs declared as files (``runtime.content.media_types``), with their types."""
        if not self._files_found:
            found = []
            for name, schema in self.inputs.items():
                accepted = media_types(schema)
                if accepted is not None:
                    found.append((name, accepted))
            self._files_found.append(tuple(found))
        return self._files_found[0]

    def render(self, inputs: Mapping[str, JSONValue]) -> list[JSONObject]:
        """The content blocks for one call: instructions as a system block, then the prompt.

        A file input (an image, a PDF, audio) becomes a content block where the prompt
        places it (``{{ photo }}``): the template sees a marker that the text is cut at. A
        file the prompt does not place follows the prompt's text; instructions cannot hold
        one (a system prompt is text only).
        """
        context = {**self.variables, **inputs}
        files: dict[str, JSONObject] = {}
        for name, _ in self._file_inputs():
            value = inputs.get(name)
            if isinstance(value, str):
                mark = f"{_FILE_MARK}{len(files)}{_FILE_END}"
                context[name] = mark
                files[mark] = media_block(value)
        blocks: list[JSONObject] = []
        if self.instructions is not None:
            system = self.instructions.render(context)
            if files and _FILE_MARK in system:
                raise InputValidationError(
                    f"method '{self.name}' of agent '{self.agent}' places a file input in its "
                    "instructions; a system prompt is text only: place it in the prompt"
                )
            if system.strip():
                blocks.append({"type": "text", "role": "system", "text": system})
        text = self.prompt.render(context)
        if not files:
            blocks.append({"type": "text", "text": text})
            return blocks
        placed: set[str] = set()
        for part in _FILE_SPLIT.split(text):
            block = files.get(part)
            if block is not None:
                placed.add(part)
                blocks.append(dict(block))
            elif part:
                blocks.append({"type": "text", "text": part})
        blocks.extend(dict(block) for mark, block in files.items() if mark not in placed)
        return blocks


@dataclass(frozen=True, repr=False, slots=True)
class Agent:
    """An agent file, compiled."""

    name: str
    description: str | None
    path: Path
    model: str | None
    methods: Mapping[str, Method]
    retry: RetryPolicy
    runtime_rules: tuple[RuntimeRule, ...]
    #: Values read with ``${env:…}`` that are secret: never shown (not in the repr either).
    secrets: frozenset[str] = field(repr=False)
    files: frozenset[Path]
    #: Tools that run on their own (python, http, command), ready to register.
    tools: tuple[Any, ...] = ()
    #: MCP servers (``tools.mcp.McpServer``): their tools are offered once a run connects.
    tool_servers: tuple[Any, ...] = ()
    #: Tools that call a method: tool name -> the method (linked after all agents compile).
    method_tools: Mapping[str, Method] = field(default_factory=dict)
    toolsets: Mapping[str, ToolsetPreset] = field(default_factory=dict)
    providers: Mapping[str, ProviderConfig] = field(default_factory=dict)
    #: The built-in ``ask_user`` tool is offered with the agent's tools (``ask_user: true``).
    ask_user: bool = False
    #: Models tried in turn when ``model`` fails for good (``run.fallback``).
    fallback_models: tuple[str, ...] = ()
    #: What one run may spend (``budget: {max_cost_usd}``); None: no limit.
    max_cost_usd: float | None = None

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        return _repr_hiding(self, self.secrets)

    def method(self, name: str | None = None) -> Method:
        """The method called ``name``, or the only one when ``name`` is None; a
        ``UsageError`` (with a did-you-mean, or the methods to choose from) otherwise."""
        if name is None:
            if len(self.methods) == 1:
                return next(iter(self.methods.values()))
            listed = ", ".join(sorted(self.methods))
            raise UsageError(f"name a method of agent '{self.name}': {listed}")
        try:
            return self.methods[name]
        except KeyError:
            names = sorted(self.methods)
            raise UsageError(
                f"agent '{self.name}' has no method '{name}'{did_you_mean(name, names)}"
                f" (methods: {', '.join(names)})"
            ) from None


@dataclass(frozen=True, repr=False, slots=True)
class Program:
    """Everything compiled from a set of files; immutable, so a reload swaps it whole."""

    root: Path
    agents: Mapping[str, Agent]
    files: frozenset[Path]
    #: A content hash of every source file: which version of the prompts a run used.
    version: str
    #: Tests kept with the prompts (in agent files and the repository's test files).
    tests: tuple[CompiledTest, ...] = ()
    #: Where recorded model replies are kept, when the project says.
    recordings: Path | None = None
    #: Everything the compile read (``compile.build``): what it takes to tell, later,
    #: whether compiling again would give the same program.
    reads: ReadSet = field(default_factory=ReadSet)

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        return _repr_hiding(self, {s for agent in self.agents.values() for s in agent.secrets})

    def select(
        self, method: str | None, *, agent: str | None = None, path: Path | None = None
    ) -> tuple[Agent, str | None]:
        """The agent and method a command line names.

        ``method`` may be "agent.method". Otherwise the agent is ``agent``, or the one
        compiled from ``path`` when that is an agent file, or the only agent there is.
        """
        if method and "." in method and agent is None:
            head, _, tail = method.partition(".")
            if head in self.agents:
                return self.agents[head], tail or None
            if len(self.agents) > 1:
                return self.agent(head), tail or None
        if agent is None and path is not None and path.is_file():
            resolved = path.resolve()
            for candidate in self.agents.values():
                if candidate.path == resolved:
                    return candidate, method
        if agent is None and len(self.agents) > 1:
            names = ", ".join(
                f"{a}.{m}" for a in sorted(self.agents) for m in sorted(self.agents[a].methods)
            )
            raise UsageError(
                f"this project holds several agents; name a method as AGENT.METHOD: {names}"
            )
        return self.agent(agent), method

    def agent(self, name: str | None = None) -> Agent:
        """The agent called ``name``, or the only one when ``name`` is None."""
        if name is None:
            if len(self.agents) == 1:
                return next(iter(self.agents.values()))
            raise UsageError(
                "this project holds several agents; name one: " + ", ".join(sorted(self.agents))
            )
        try:
            return self.agents[name]
        except KeyError:
            names = sorted(self.agents)
            raise UsageError(
                f"no agent '{name}'{did_you_mean(name, names)} (agents: {', '.join(names)})"
            ) from None
