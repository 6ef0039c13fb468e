"""The YAML format as pydantic models: plain data, unknown keys refused.

Field docstrings are written for the people editing the files: they become the descriptions
editors show from ``schemas/`` (``spec/schema.py`` reads them when it writes the schemas, so
building these models at start-up does not parse this file). Nothing here runs or compiles
anything.

No ``from __future__ import annotations`` here, unlike the rest of the package: pydantic
would evaluate every annotation from its text, a third of the cost of creating the models.
"""

import re
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

__all__ = [
    "AgentSpec",
    "AgentToolSpec",
    "BudgetSpec",
    "ChoiceSpec",
    "DefaultsSpec",
    "ExecOptionsSpec",
    "ExpectSpec",
    "HistorySpec",
    "HttpToolSpec",
    "JudgeSpec",
    "McpToolSpec",
    "MethodSpec",
    "ProjectSpec",
    "ProviderSpec",
    "RetrySpec",
    "RuntimeRuleSpec",
    "SimilarSpec",
    "TestCaseSpec",
    "TestFileSpec",
    "ToolCallExpectSpec",
    "ToolDoubleSpec",
    "ToolsetSpec",
]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def _check_name(kind: str, name: str) -> str:
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"{kind} name {name!r} must start with a letter or '_' and hold only letters, "
            "digits, '_' and '-'"
        )
    return name


def _plain_name(name: str) -> str:
    return _check_name("the", name)


#: Keys naming methods, tools and toolsets: identifiers, '-' allowed.
MethodName = Annotated[str, AfterValidator(_plain_name)]

#: A list of model refs: at least one, none empty.
ModelList = Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]


def _one_model_list(
    fallback_models: "list[str] | None", info: ValidationInfo
) -> "list[str] | None":
    """``fallback_models`` beside a ``model`` list is refused (at ``fallback_models``)."""
    if fallback_models is not None and isinstance(info.data.get("model"), list):
        raise ValueError(
            "give the fallback models either in the 'model' list or in 'fallback_models', not both"
        )
    return fallback_models


class _Spec(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        defer_build=True,
        use_attribute_docstrings=False,
        str_strip_whitespace=False,
    )


class BudgetSpec(_Spec):
    """What a run may spend on model calls; checked before each call."""

    max_cost_usd: Annotated[float, Field(gt=0)]
    """Stop calling the model once the run's cost reaches this many US dollars (prices from
    genai-prices). A model without a known price cannot be counted: calling one under a
    budget stops the run (the offline `test` model spends nothing)."""


class ExecOptionsSpec(_Spec):
    """Options of one model call; set in `defaults` for every method, or on a method."""

    model: str | ModelList | None = None
    """The model as "provider:model_id" (e.g. "openai:gpt-4o-mini"), or `test` for the built-in
    offline model; or a list, the first model and the fallbacks tried in turn when it fails
    for good. Overrides the agent's `model` (and its fallbacks)."""

    fallback_models: ModelList | None = None
    """Models tried in turn when the model fails for good (retries exhausted, quota, 5xx),
    each with the same call."""

    timeout_s: Annotated[float, Field(gt=0)] | None = None
    """Wall-clock budget in seconds for the whole call, retries and repairs included."""

    max_iterations: Annotated[int, Field(ge=1)] | None = None
    """Upper bound on tool-loop iterations (one model call plus its tool runs each)."""

    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    """Sampling temperature passed to the model."""

    max_tokens: Annotated[int, Field(ge=1)] | None = None
    """Upper bound on tokens the model may generate per reply."""

    tool_choice: Literal["auto", "required", "none"] | None = None
    """Whether the model may (auto), must (required) or must not (none) call tools.
    Sent only when set."""

    parallel_tool_calls: bool | None = None
    """Allow several tool calls in one reply. Sent only when set."""

    thinking_level: Literal["off", "low", "medium", "high", "xhigh"] | None = None
    """Reasoning effort, for models that support it."""

    max_steps: Annotated[int, Field(ge=1)] | None = None
    """How many methods one run may pass through by `choices` (default 10); stops loops."""

    _fallbacks_once = field_validator("fallback_models")(_one_model_list)


class DefaultsSpec(ExecOptionsSpec):
    """Call options every method inherits unless it sets its own."""


class RetrySpec(_Spec):
    """How failed model calls are retried."""

    max_retries: Annotated[int, Field(ge=1)] | None = None
    """Total attempts per call, the first included (>= 1).
    Unset: OPENPROGRAM_MAX_RETRIES, else 6."""

    backoff_base_s: Annotated[float, Field(gt=0)] | None = None
    """Base of the exponential backoff in seconds (base * 2**n, ±25% jitter). Unset:
    OPENPROGRAM_RETRY_BACKOFF_BASE, else 1.5."""

    max_validation_retries: Annotated[int, Field(ge=0, le=2)] | None = None
    """Repair turns allowed when structured output fails validation: 0, 1 or 2 (default 2)."""


class HttpToolSpec(_Spec):
    """An HTTP request made when the tool is called. Strings are templates of the arguments."""

    url: str
    """The URL, e.g. "https://shop.example.com/orders/{{ order_id }}". Only http(s). Scheme,
    host and port are written out before any `{{ }}` (or listed in `hosts`); each value is
    percent-encoded as one path segment or query value (`{{ repo | path }}` keeps its `/`)."""

    hosts: list[str] | None = None
    """Hosts the URL may reach when its host is templated: names or globs with an optional
    port, e.g. [api.example.com, "*.example.com:8443"] (no port: the scheme's default)."""

    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"] = "GET"
    """The HTTP method."""

    headers: dict[str, str] = Field(default_factory=dict)
    """Request headers; values may read the arguments and ${env:…} (kept secret)."""

    query: dict[str, str] = Field(default_factory=dict)
    """Query parameters, templates of the arguments."""

    body: Any = None
    """The request body: a template string, or a JSON value whose strings are templates."""


class McpToolSpec(_Spec):
    """An MCP server whose tools the agent gets, named "<this tool's name>__<the server's
    tool name>" (e.g. files__read_file). Exactly one of `command` (a program started for the
    run, talking over stdin/stdout) or `url` (a streamable HTTP endpoint)."""

    command: list[str] | None = None
    """The server's program and its arguments, e.g. [python, servers/notes.py] (never a
    shell). It is started on the first run that offers its tools and stopped with the program."""

    cwd: str | None = None
    """Working directory of a `command` server, relative to this file, inside the project
    (default: the project root)."""

    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables of a `command` server, e.g. {TOKEN: "${env:NOTES_TOKEN}"}
    (kept secret). It gets only these and a few safe ones (PATH, HOME, …), not the runner's."""

    url: str | None = None
    """The streamable HTTP endpoint of a running server, e.g. "http://127.0.0.1:9000/mcp"."""

    headers: dict[str, str] = Field(default_factory=dict)
    """HTTP headers sent to a `url` server, e.g. {Authorization: "Bearer ${env:T}"} (kept
    secret)."""

    timeout_s: Annotated[float, Field(gt=0)] | None = None
    """Seconds each call may take (default 30); starting may take this or 30, the longer."""

    confirm: bool | list[str] = False
    """Ask the person before each call: true for every tool of the server, or the server's
    tool names or globs that need it, e.g. [delete_note, "write_*"]."""

    @field_validator("command")
    @classmethod
    def _program_given(cls, command: list[str] | None) -> list[str] | None:
        if command is not None and (not command or not command[0]):
            raise ValueError("'command' needs at least the program name")
        return command

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is not None and not re.match(r"^https?://[^/?#\s]+", url):
            raise ValueError(f"'url' must be an http:// or https:// URL, not {url!r}")
        return url

    @model_validator(mode="after")
    def _one_transport(self) -> Self:
        if (self.command is None) == (self.url is None):
            found = "both" if self.command is not None else "neither"
            raise ValueError(
                f"an mcp server needs exactly one of 'command' or 'url' ({found} given)"
            )
        if self.url is not None and (self.env or self.cwd is not None):
            raise ValueError(
                "'env' and 'cwd' apply to a 'command' server; a 'url' server takes 'headers'"
            )
        if self.command is not None and self.headers:
            raise ValueError("'headers' apply to a 'url' server; a 'command' server takes 'env'")
        return self


class AgentToolSpec(_Spec):
    """A tool the model can call: exactly one of `python`, `http`, `command`, `method` or
    `mcp` (the tools of an MCP server)."""

    description: str | None = None
    """What the tool does, for the model."""

    parameters: dict[str, Any] | None = None
    """The tool's arguments as a JSON Schema object. For `python` tools it can be left out:
    it is read from the function's signature. For `method` tools it is the method's inputs."""

    python: str | None = None
    """A Python function, "module:function", importable from the project root."""

    http: HttpToolSpec | None = None
    """An HTTP request, templated over the arguments."""

    command: list[str] | None = None
    """A program and its arguments (never a shell); each element is a template."""

    method: str | None = None
    """A method called as a tool: "name" of this agent, or "agent.method" in the repository."""

    mcp: McpToolSpec | None = None
    """An MCP server: its tools become this agent's, named "<name>__<tool>" (files__read_file)."""

    cwd: str | None = None
    """Working directory of a `command` tool, relative to this file, inside the project."""

    timeout_s: Annotated[float, Field(gt=0)] | None = None
    """Seconds the tool may run (default 30)."""

    max_output_bytes: Annotated[int, Field(ge=1)] | None = None
    """Output beyond this many bytes is cut (http: 1 MB, command: 64 KB by default)."""

    ok_exit_codes: list[Annotated[int, Field(ge=0, le=255)]] | None = None
    """Exit codes of a `command` tool that are a normal result (0 always is), e.g. [0, 1]
    for grep, which exits 1 when nothing matches; any other is a failure."""

    confirm: bool | str = False
    """Ask the person before each call: true (the question names the tool and its
    arguments), or the question, a template of the arguments, e.g. "Delete {{ path }}?".
    Declined, the model is told "declined by the user"; with nobody to ask and no --yes the
    tool is refused, never run."""

    @model_validator(mode="after")
    def _one_kind(self) -> Self:
        kinds = [
            k
            for k in ("python", "http", "command", "method", "mcp")
            if getattr(self, k) is not None
        ]
        if len(kinds) != 1:
            found = ", ".join(kinds) if kinds else "none"
            raise ValueError(
                "a tool needs exactly one of 'python', 'http', 'command', 'method' or 'mcp' "
                f"(found: {found})"
            )
        if self.mcp is not None:
            misplaced = [
                k
                for k in ("description", "parameters", "timeout_s", "max_output_bytes")
                if getattr(self, k) is not None
            ]
            if misplaced or self.confirm is not False:
                what = ", ".join(
                    f"'{k}'"
                    for k in (*misplaced, *(["confirm"] if self.confirm is not False else []))
                )
                raise ValueError(
                    f"{what} cannot be set on an mcp tool: its tools come with their "
                    "descriptions and parameters; put 'timeout_s' and 'confirm' under 'mcp:'"
                )
        if self.command is not None and not self.command:
            raise ValueError("'command' needs at least the program name")
        if self.cwd is not None and self.command is None:
            raise ValueError("'cwd' applies to 'command' tools only")
        if self.ok_exit_codes is not None and self.command is None:
            raise ValueError("'ok_exit_codes' applies to 'command' tools only")
        if self.confirm is not False and self.method is not None:
            raise ValueError("'confirm' applies to python, http and command tools")
        return self


class ToolsetSpec(_Spec):
    """A named preset of tools: names or globs, other presets included, allow and deny."""

    description: str | None = None
    """What the toolset is for."""

    tools: list[str] = Field(default_factory=list)
    """Tool names or glob patterns ("lookup_*")."""

    includes: list[str] = Field(default_factory=list)
    """Other toolsets whose tools this one adds (their deny rules come along)."""

    allow: list[str] | None = None
    """Only tools matching one of these globs are kept."""

    deny: list[str] = Field(default_factory=list)
    """Tools matching any of these globs are refused, here and in anything that uses this set."""


class ChoiceSpec(_Spec):
    """One option the model can pick to end the turn."""

    description: str | None = None
    """When to pick this option, for the model."""

    value: Any = None
    """The run's result when this option is picked."""

    method: str | None = None
    """Continue with this method of the agent; its inputs come from the pick's arguments
    and, where names match, the current inputs."""

    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    """Fields the pick must carry, as a JSON Schema object; the result is
    {decision: name, ...fields}, or the method's inputs."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=False,
        populate_by_name=True,
    )

    @model_validator(mode="after")
    def _value_or_method(self) -> Self:
        if self.value is not None and self.method is not None:
            raise ValueError("a choice takes either 'value' or 'method', not both")
        return self


class RuntimeRuleSpec(_Spec):
    """Which runtime serves the models matching `match`. The first matching rule wins."""

    match: str
    """A glob over model refs, e.g. "anthropic:*" or "local:*"."""

    runtime: str
    """A registered runtime id (`openprogram-run runtimes` lists them), e.g. openai, anthropic."""

    options: dict[str, Any] = Field(default_factory=dict)
    """Options for the runtime, e.g. base_url, api_key_env, headers, timeout_s."""


class JudgeSpec(_Spec):
    """A model grades the output against a rubric: a score from 0 to 1 and a reason."""

    rubric: str
    """What a good output does, in words, e.g. "Apologises once and names the refund"."""

    model: str | None = None
    """The model that grades (default: the test file's `judge_model`, else the model the
    test runs on)."""

    pass_at: Annotated[float, Field(ge=0, le=1)] = 0.7
    """The lowest score that passes."""


class SimilarSpec(_Spec):
    """The output means about the same as a reference text: the cosine similarity of their
    embeddings (the provider's embeddings endpoint) is at least `at_least`."""

    to: str
    """The reference text."""

    at_least: Annotated[float, Field(ge=-1, le=1)] = 0.8
    """The lowest similarity that passes."""

    model: str | None = None
    """The embeddings model (default: the test file's `embed_model`, else
    `text-embedding-3-small` at the provider of the model the test runs on)."""


class ToolCallExpectSpec(_Spec):
    """A tool call the run must have made."""

    name: str
    """The tool."""

    arguments: dict[str, Any] | None = None
    """Arguments the call had, e.g. {id: "1042"}; arguments not named here may be anything."""


class ExpectSpec(_Spec):
    """What a test expects of a run. Every expectation given must hold."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=False,
        populate_by_name=True,
    )

    equals: Any = None
    """The output equals this value (text, or a JSON value for structured output)."""

    contains: str | list[str] | None = None
    """The output (as text) contains this, or each of these."""

    not_contains: str | list[str] | None = None
    """The output (as text) contains none of these."""

    regex: str | None = None
    """The output (as text) matches this regular expression (re.search)."""

    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    """The output is valid against this JSON Schema (inline or {$ref: file})."""

    json_path: dict[str, Any] | None = None
    """Values at JSON paths of the output, e.g. {"$.category": billing, "$.items[0].id": 7}."""

    choice: str | None = None
    """The option the test's method picked (its `choices`)."""

    methods: list[str] | None = None
    """The methods the run passed through, in order, e.g. [assess, investigate, answer]."""

    tools_called: list[str | ToolCallExpectSpec] | None = None
    """Tools that must have been called (each at least once): a name, or
    {name: lookup_order, arguments: {id: "1042"}} for a call with these arguments (others may
    differ). Calls answered by a double or not run offline count too."""

    tools_not_called: list[str] | None = None
    """Tools that must not have been called."""

    error: str | None = None
    """The run fails, and its error message contains this text."""

    judge: JudgeSpec | None = None
    """A model grades the output against a rubric, e.g. {rubric: "Polite, names the
    refund", pass_at: 0.7}; its call is recorded and replayed like the run's."""

    similar: SimilarSpec | None = None
    """The output is close in meaning to a text, e.g. {to: "We refunded you.", at_least:
    0.8}, by the cosine similarity of embeddings (recorded and replayed like model calls)."""


class ToolDoubleSpec(_Spec):
    """What a doubled tool answers: `returns` a value or `raises` an error, for calls whose
    arguments match `when` (or for any call). A doubled tool never runs for real."""

    when: dict[str, Any] | None = None
    """Arguments the call must have, e.g. {id: "1042"} (others may be anything). Left out: any
    call. The first double whose `when` matches answers."""

    returns: Any = None
    """What the tool returns; the model sees it as the tool's result (JSON for non-text)."""

    raises: str | None = None
    """The tool fails with this message instead of returning."""

    @model_validator(mode="after")
    def _one_outcome(self) -> Self:
        given = {"returns", "raises"} & self.model_fields_set
        if len(given) != 1:
            what = "not both" if given else "one of them"
            raise ValueError(f"a tool double gives either 'returns' or 'raises' ({what})")
        return self


#: Tool name -> its doubles, in the order they are tried.
ToolDoubles = dict[MethodName, list[ToolDoubleSpec]]


class TestCaseSpec(_Spec):
    """One test of an agent: a method, its inputs, and what the run must show."""

    __test__ = False  # not a pytest test class

    name: str
    """What the test checks, in a few words."""

    method: str
    """The method to run."""

    inputs: dict[str, Any] = Field(default_factory=dict)
    """The method's inputs."""

    cases: str | None = None
    """A dataset file (JSON Lines, relative to this file), one case a line: the method's
    inputs, or {name, inputs, expect} (the line's `expect` keys replace this test's). Each
    line is a test of its own, named after this one and its line."""

    model: str | None = None
    """Run on this model (default: the offline mode of `openprogram-run test`)."""

    expect: ExpectSpec = Field(default_factory=ExpectSpec.model_construct)
    """What the run must show."""

    tools: ToolDoubles = Field(default_factory=dict)
    """Tool doubles: what a tool returns or raises in this test, e.g.
    {lookup_order: [{when: {id: "1042"}, returns: {status: shipped}}, {raises: unavailable}]}.
    A tool named here replaces the test file's doubles of that tool."""

    live_tools: bool | None = None
    """Run http and command tools for real under the offline `test` model (default: the test
    file's `live_tools`, else false: such calls are answered "not run")."""

    answers: list[Any] | None = None
    """The person's answers, in the order asked: yes/no (or true/false) for a tool's
    `confirm`, text for an `ask_user` question, null to decline. Unset: nobody is there to
    ask (confirmed tools are refused). Running out of answers declines."""


class TestFileSpec(_Spec):
    """A file of tests for one agent of the repository."""

    __test__ = False

    version: Literal[1]
    """The format version. Always 1."""

    agent: str
    """The agent these tests run."""

    tools: ToolDoubles = Field(default_factory=dict)
    """Tool doubles every test of this file gets (a test's own `tools` win, tool by tool):
    {lookup_order: [{when: {id: "1042"}, returns: {status: shipped}}]}."""

    live_tools: bool = False
    """Run http and command tools for real under the offline `test` model in these tests."""

    judge_model: str | None = None
    """The model that grades `judge:` expectations of these tests (default: the project's
    `judge_model`, else the model each test runs on)."""

    embed_model: str | None = None
    """The embeddings model of `similar:` expectations of these tests."""

    tests: list[TestCaseSpec]
    """The test cases."""


class HistorySpec(_Spec):
    """How much of a chat session's conversation a method is sent before the new message."""

    max_messages: Annotated[int, Field(ge=0)] | None = None
    """Send at most this many earlier messages (the newest; 0: none)."""

    max_tokens: Annotated[int, Field(ge=1)] | None = None
    """Send the newest earlier messages that fit in about this many tokens (estimated as
    four characters a token)."""

    @model_validator(mode="after")
    def _some_limit(self) -> Self:
        if self.max_messages is None and self.max_tokens is None:
            raise ValueError("'history' needs 'max_messages' or 'max_tokens' (or both)")
        return self


class MethodSpec(ExecOptionsSpec):
    """One thing the agent can do: a prompt, its inputs and the shape of its answer."""

    description: str | None = None
    """What the method does, for people and for models that call it as a tool."""

    inputs: dict[str, dict[str, Any] | bool] = Field(default_factory=dict)
    """The method's inputs as JSON Schema properties, name -> schema. An input is required
    unless its schema has a `default`."""

    prompt: str | None = None
    """The user message, a Jinja2 template over the inputs."""

    prompt_file: str | None = None
    """A file holding the prompt template, relative to this file."""

    response_schema: dict[str, Any] | bool | None = None
    """The JSON Schema the answer must match: a bare schema, {$ref: file}, or an envelope
    {schema, name, description, strict, fallback, max_validation_retries}. Unset: text."""

    fallback: Literal["auto", "prompt", "none"] | None = None
    """How to get the answer of `response_schema` from a model without native structured
    output: `auto` (the default) uses a hidden submit tool where the runtime can force one;
    `prompt` also allows a prompt instruction alone; `none` requires native output."""

    toolset: str | None = None
    """Which tools the method gets: a toolset name, or `none`. Unset: every tool of the agent."""

    tools_allow: list[str] | None = None
    """Only tools matching these globs; can narrow the toolset, never widen it."""

    tools_deny: list[str] | None = None
    """Tools matching these globs are refused, on top of every other deny rule."""

    choices: dict[str, ChoiceSpec] | None = None
    """End the turn by picking one of these options: a value, another method, or a schema."""

    budget: BudgetSpec | None = None
    """What one run of this method may spend on model calls (instead of the agent's budget)."""

    history: HistorySpec | None = None
    """In a chat session (`openprogram-run chat`, serve's `?session=`), how much of the
    conversation so far the model is sent. Unset: all of it."""

    @field_validator("inputs")
    @classmethod
    def _input_names(cls, value: dict[str, Any]) -> dict[str, Any]:
        for name in value:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(
                    f"input name {name!r} must be an identifier (letters, digits, '_'), "
                    "so templates can read it"
                )
        return value

    @model_validator(mode="after")
    def _one_prompt(self) -> Self:
        if self.prompt is not None and self.prompt_file is not None:
            raise ValueError("set either 'prompt' or 'prompt_file', not both")
        if self.prompt is None and self.prompt_file is None:
            raise ValueError("a method needs a 'prompt' (a template) or a 'prompt_file'")
        if self.choices is not None and self.response_schema is not None:
            raise ValueError("a method takes 'choices' or 'response_schema', not both")
        if self.choices is not None and not self.choices:
            raise ValueError("'choices' needs at least one option")
        return self


class AgentSpec(_Spec):
    """An agent: its model, instructions and methods."""

    version: Literal[1]
    """The format version. Always 1."""

    name: str
    """The agent's name, used on the command line and in records."""

    description: str | None = None
    """What the agent is for."""

    model: str | ModelList | None = None
    """The default model: "provider:model_id" or `test` (offline). `${env:OPENPROGRAM_MODEL:-test}`
    runs offline unless the variable is set. A list names fallbacks: each is tried in turn
    when the one before fails for good (retries exhausted, quota, 5xx)."""

    fallback_models: ModelList | None = None
    """Models tried in turn when `model` fails for good, each with the same call."""

    budget: BudgetSpec | None = None
    """What one run may spend on model calls, e.g. {max_cost_usd: 0.50}."""

    _fallbacks_once = field_validator("fallback_models")(_one_model_list)

    instructions: str | None = None
    """The system prompt, a Jinja2 template (it may read the inputs all methods declare)."""

    instructions_file: str | None = None
    """A file holding the system prompt template, relative to this file."""

    vars: dict[str, Any] = Field(default_factory=dict)
    """Constants every template of this agent can read, e.g. {product: Acme Mail}. A method
    input of the same name takes precedence."""

    defaults: DefaultsSpec = Field(default_factory=DefaultsSpec.model_construct)
    """Call options every method inherits."""

    retry: RetrySpec = Field(default_factory=RetrySpec.model_construct)
    """How failed model calls are retried."""

    tools: dict[MethodName, AgentToolSpec] = Field(default_factory=dict)
    """Tools the agent's methods can call, by name."""

    toolsets: dict[MethodName, ToolsetSpec] = Field(default_factory=dict)
    """Named presets of tools with allow and deny rules."""

    ask_user: bool = False
    """Give the agent the built-in tool `ask_user` ({question, options}), with which the
    model asks the person a question mid-turn. Methods get it like any tool of the agent
    (a `toolset` must list it). With nobody to ask, the model is told so."""

    methods: Annotated[dict[MethodName, MethodSpec], Field(min_length=1)]
    """The agent's methods, by name."""

    runtimes: list[RuntimeRuleSpec] = Field(default_factory=list)
    """Which runtime serves which model; the first matching rule wins."""

    tests: list[TestCaseSpec] = Field(default_factory=list)
    """Tests of this agent, run by `openprogram-run test`."""

    @field_validator("name")
    @classmethod
    def _agent_name(cls, value: str) -> str:
        return _check_name("agent", value)

    @model_validator(mode="after")
    def _one_instructions(self) -> Self:
        if self.instructions is not None and self.instructions_file is not None:
            raise ValueError("set either 'instructions' or 'instructions_file', not both")
        return self


class ProviderSpec(_Spec):
    """How to reach a model provider. Models "NAME:model_id" use the provider called NAME."""

    runtime: str | None = None
    """The runtime that speaks to it (openai, anthropic, or a plugin). Unset: the provider's
    name, so a provider called `openai` uses the `openai` runtime."""

    base_url: str | None = None
    """The API's base URL, e.g. "http://127.0.0.1:11434/v1" for a local Ollama."""

    api_key_env: str | None = None
    """The environment variable holding the API key (never the key itself)."""

    headers: dict[str, str] = Field(default_factory=dict)
    """Extra HTTP headers; values may use ${env:…} and are kept secret."""

    timeout_s: Annotated[float, Field(gt=0)] | None = None
    """Seconds the server may stay silent (before its first byte or between two) before an
    attempt fails. Unset: OPENPROGRAM_READ_TIMEOUT_S, else 120."""

    options: dict[str, Any] = Field(default_factory=dict)
    """Further options for the runtime."""


class ProjectSpec(_Spec):
    """A prompt repository: `openprogram.yaml` at its root."""

    version: Literal[1]
    """The format version. Always 1."""

    name: str | None = None
    """The repository's name, for records."""

    description: str | None = None
    """What the repository holds."""

    agents: list[str] = Field(default_factory=lambda: ["agents/*.yaml"])
    """Agent files, as globs relative to this file (default: agents/*.yaml)."""

    templates: list[str] = Field(default_factory=list)
    """Template folders: `include`, `import` and `extends` find templates here."""

    schemas: list[str] = Field(default_factory=list)
    """Schema folders: a `$ref` that is not found beside the file naming it is looked up here."""

    toolsets: dict[MethodName, ToolsetSpec] = Field(default_factory=dict)
    """Toolsets every agent can use (an agent's own toolset of the same name wins)."""

    providers: dict[MethodName, ProviderSpec] = Field(default_factory=dict)
    """Model providers by name: base URL, key variable, headers, timeouts."""

    runtimes: list[RuntimeRuleSpec] = Field(default_factory=list)
    """Which runtime serves which model, after each agent's own rules; first match wins."""

    tests: list[str] = Field(default_factory=list)
    """Test files (globs relative to this file), each `version: 1`, `agent:` and `tests:`."""

    recordings: str | None = None
    """A folder of recorded model replies; `openprogram-run test` replays them offline."""

    judge_model: str | None = None
    """The model that grades tests' `judge:` expectations (a test file's `judge_model` and
    an expectation's `model` win; default: the model each test runs on)."""

    python_packages: list[str] = Field(default_factory=list)
    """Installed packages `python` tools may name (e.g. [mypkg]), besides the project's own
    modules. Any other module outside the project is refused."""
