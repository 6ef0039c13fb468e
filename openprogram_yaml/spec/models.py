"""The YAML format as pydantic models: plain data, unknown keys refused.

Field docstrings are written for the people editing the files: they become the descriptions
editors show from ``schemas/``. Nothing here runs or compiles anything.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "AgentSpec",
    "DefaultsSpec",
    "ExecOptionsSpec",
    "MethodSpec",
    "RetrySpec",
    "RuntimeRuleSpec",
]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def _check_name(kind: str, name: str) -> str:
    if not _NAME.match(name):
        raise ValueError(
            f"{kind} name {name!r} must start with a letter or '_' and hold only letters, "
            "digits, '_' and '-'"
        )
    return name


def _method_name(name: str) -> str:
    return _check_name("method", name)


MethodName = Annotated[str, AfterValidator(_method_name)]


class _Spec(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
        str_strip_whitespace=False,
    )


class ExecOptionsSpec(_Spec):
    """Options of one model call; set in `defaults` for every method, or on a method."""

    model: str | None = None
    """The model as "provider:model_id" (e.g. "openai:gpt-4o-mini"), or `test` for the built-in
    offline model. Overrides the agent's `model`."""

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


class RuntimeRuleSpec(_Spec):
    """Which runtime serves the models matching `match`. The first matching rule wins."""

    match: str
    """A glob over model refs, e.g. "anthropic:*" or "local:*"."""

    runtime: str
    """A registered runtime id (`openprogram-run runtimes` lists them), e.g. openai, anthropic."""

    options: dict[str, Any] = Field(default_factory=dict)
    """Options for the runtime, e.g. base_url, api_key_env, headers, timeout_s."""


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

    @field_validator("inputs")
    @classmethod
    def _input_names(cls, value: dict[str, Any]) -> dict[str, Any]:
        for name in value:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
                raise ValueError(
                    f"input name {name!r} must be an identifier (letters, digits, '_'), "
                    "so templates can read it"
                )
        return value

    @model_validator(mode="after")
    def _one_prompt(self) -> MethodSpec:
        if self.prompt is not None and self.prompt_file is not None:
            raise ValueError("set either 'prompt' or 'prompt_file', not both")
        if self.prompt is None and self.prompt_file is None:
            raise ValueError("a method needs a 'prompt' (a template) or a 'prompt_file'")
        return self


class AgentSpec(_Spec):
    """An agent: its model, instructions and methods."""

    version: Literal[1]
    """The format version. Always 1."""

    name: str
    """The agent's name, used on the command line and in records."""

    description: str | None = None
    """What the agent is for."""

    model: str | None = None
    """The default model: "provider:model_id" or `test` (offline). `${env:OPENPROGRAM_MODEL:-test}`
    runs offline unless the variable is set."""

    instructions: str | None = None
    """The system prompt, a Jinja2 template (it may read the inputs all methods declare)."""

    instructions_file: str | None = None
    """A file holding the system prompt template, relative to this file."""

    vars: dict[str, Any] = Field(default_factory=dict)
    """Constants every template of this agent can read, e.g. {product: Acme Mail}. A method
    input of the same name takes precedence."""

    defaults: DefaultsSpec = Field(default_factory=DefaultsSpec)
    """Call options every method inherits."""

    retry: RetrySpec = Field(default_factory=RetrySpec)
    """How failed model calls are retried."""

    methods: Annotated[dict[MethodName, MethodSpec], Field(min_length=1)]
    """The agent's methods, by name."""

    runtimes: list[RuntimeRuleSpec] = Field(default_factory=list)
    """Which runtime serves which model; the first matching rule wins."""

    @field_validator("name")
    @classmethod
    def _agent_name(cls, value: str) -> str:
        return _check_name("agent", value)

    @model_validator(mode="after")
    def _one_instructions(self) -> AgentSpec:
        if self.instructions is not None and self.instructions_file is not None:
            raise ValueError("set either 'instructions' or 'instructions_file', not both")
        return self
