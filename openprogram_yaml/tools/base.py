"""What every configured tool kind shares: its spec, argument checks, and output caps.

A ``ConfiguredTool`` is what the runtime calls a tool: ``.spec`` (name, description,
parameters) and ``async execute(**arguments)``. The tool loop validates arguments before
``execute``; ``execute`` validates again so that a direct caller gets the same guarantee.
Every failure is a ``ToolError`` whose message is written for the model: what went wrong
and, where it helps, what to do about it.

Problems found while building a tool (a missing program, a refused Python target, a bad
HTTP method) raise ``ToolBuildError`` naming the offending field, so the compiler can put
it at the right YAML position.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Protocol

from openprogram_yaml.errors import ToolError
from openprogram_yaml.json_types import JSONObject, JSONValue, holds_text_only, is_text
from openprogram_yaml.runtime.validation import SchemaValidator
from openprogram_yaml.runtimes.protocol import ToolSpec

__all__ = [
    "EMPTY_PARAMETERS",
    "ConfiguredTool",
    "ConfirmQuestion",
    "TextTemplate",
    "ToolBuildError",
    "cap_text",
    "render_template",
    "unicode_text",
    "unicode_value",
]

EMPTY_PARAMETERS: Mapping[str, JSONValue] = {"type": "object", "properties": {}}


class TextTemplate(Protocol):
    """A compiled template (``compile.templates.CompiledTemplate`` satisfies it)."""

    @property
    def source(self) -> str: ...

    @property
    def variables(self) -> frozenset[str]:
        """The names it reads from the render variables."""
        ...

    def render(self, variables: Mapping[str, object], /) -> str: ...


class ToolBuildError(ValueError):
    """A tool cannot be built from its configuration.

    ``field`` names the configuration key at fault (``"python"``, ``"url"``, ``"cwd"`` …) so
    the compiler can report the error at that key's position.
    """

    def __init__(self, message: str, *, field: str) -> None:
        self.field = field
        super().__init__(message)


def unicode_text(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD. A tool's result may hold them (a
    Python function's string, a reply in charset utf-7 or unicode_escape): no request,
    record or trace can be written in UTF-8 with one (the record of the run failed with a
    UnicodeEncodeError traceback after it)."""
    if is_text(text):
        return text
    # Through UTF-16, whole pairs become their character again; lone halves U+FFFD.
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def unicode_value(value: object) -> object:
    """``value`` with ``unicode_text`` applied to every string in it, keys too (a JSON
    reply's "\\ud800" parses to a lone surrogate). Walked without recursion: JSON nested
    as deep as the decoder reads must not reach the interpreter's limit here. Values that
    need nothing are returned as they are."""
    if isinstance(value, str):
        return unicode_text(value)
    if not isinstance(value, dict | list) or holds_text_only(value):
        return value  # every result passes here: a read-only walk, ASCII text not encoded
    root: list[Any] = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        parent, slot = stack.pop()
        item = parent[slot]
        if isinstance(item, str):
            fixed = unicode_text(item)
            if fixed is not item:
                parent[slot] = fixed
        elif isinstance(item, list):
            stack.extend((item, index) for index in range(len(item)))
        elif isinstance(item, dict):
            if any(isinstance(k, str) and unicode_text(k) is not k for k in item):
                item = {unicode_text(k) if isinstance(k, str) else k: v for k, v in item.items()}
                parent[slot] = item
            stack.extend((item, key) for key in item)
    return root[0]


def cap_text(text: str, limit: int, *, unit: str = "characters") -> str:
    """``text`` cut to ``limit``, with a marker saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[truncated: {len(text) - limit} more {unit} not shown]"


def render_template(template: TextTemplate, variables: Mapping[str, object], what: str) -> str:
    """``template`` rendered, or a ``ToolError`` saying which part of the tool failed."""
    try:
        return template.render(variables)
    except Exception as exc:  # a template error is the tool's failure, reported to the model
        raise ToolError(f"could not render the {what}: {exc}") from exc


class ConfirmQuestion:
    """A tool's ``confirm`` question, a template of the call's arguments."""

    def __init__(self, template: TextTemplate) -> None:
        self.template = template

    def __call__(self, arguments: Mapping[str, object]) -> str:
        return render_template(self.template, arguments, "confirm question")


class ConfiguredTool:
    """Base of the tool kinds: a spec, argument validation, and ``execute``.

    Subclasses implement ``_run(arguments)``. ``files`` are source files the tool depends on
    (hot reload watches them); ``aclose()`` releases what the tool holds open.
    """

    #: The tool kind, also used as the tool's ``source`` (so ``tools_source`` can filter).
    kind: ClassVar[str] = "tool"

    def __init__(
        self, name: str, description: str, parameters: Mapping[str, JSONValue] | None
    ) -> None:
        schema = dict(parameters) if parameters is not None else dict(EMPTY_PARAMETERS)
        self.spec = ToolSpec(name=name, description=description, parameters=schema)
        self.source = self.kind
        #: Ask the person before each call: True, or the question (see ``ConfirmQuestion``).
        self.confirm: bool | ConfirmQuestion = False
        self._validator = SchemaValidator(schema)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def files(self) -> frozenset[Path]:
        return frozenset()

    def check_arguments(self, arguments: Mapping[str, JSONValue]) -> JSONObject:
        """The arguments as a dict, or a ``ToolError`` listing every schema problem."""
        issues = self._validator.errors(dict(arguments))
        if issues:
            listed = "\n".join(f"- {issue}" for issue in issues)
            raise ToolError(f"invalid arguments for tool {self.name!r}:\n{listed}")
        return dict(arguments)

    def template_variables(self, arguments: Mapping[str, JSONValue]) -> JSONObject:
        """What templates see: the arguments, plus schema defaults for absent properties.

        Other absent optional properties stay undefined, so a template tests them with
        ``is defined`` or ``| default(…)``; reading one unguarded is a clear error.
        """
        variables: JSONObject = {}
        properties = self.spec.parameters.get("properties")
        if isinstance(properties, Mapping):
            for key, sub in properties.items():
                if isinstance(sub, Mapping) and "default" in sub:
                    variables[key] = sub["default"]
        variables.update(arguments)
        return variables

    async def execute(self, **arguments: JSONValue) -> object:
        """Run the tool with ``arguments`` (keyword arguments, as the tool loop passes them).
        Its result's text is made Unicode text (``unicode_value``) here, whatever the kind."""
        return unicode_value(await self._run(self.check_arguments(arguments)))

    async def _run(self, arguments: JSONObject) -> object:
        raise NotImplementedError

    async def aclose(self) -> None:
        """Release resources (connections); the base holds none."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
