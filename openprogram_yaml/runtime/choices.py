"""``choices``: the turn ends by picking one option, which decides what ``exec`` returns.

A pick is a JSON object ``{"decision": <option>, ...fields}``. Where the runtime can
constrain output it is constrained: natively by a schema, or by forcing one hidden
``choose_<option>`` tool call. Otherwise the last JSON pick in the reply counts. An invalid
pick gets one re-pick by default, then ``DecisionError``. The result is the option's
``value``, the return value of its ``method`` (called with the pick's fields), or
``{"decision": name, **fields}`` for an option with a ``schema``.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from openprogram_yaml.errors import DecisionError
from openprogram_yaml.json_types import JSONObject, JSONValue
from openprogram_yaml.runtime.content import assistant_reply
from openprogram_yaml.runtime.toolloop import call_maybe_async
from openprogram_yaml.runtime.turn_end import UNSET, Done, Redo, Unset
from openprogram_yaml.runtime.validators import validator_for
from openprogram_yaml.runtimes.protocol import Capabilities, Message, RuntimeResult, ToolSpec

__all__ = ["Choice", "ChoiceSet", "ChoiceTerminal", "Pick", "find_last_pick", "normalize_choices"]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,56}$")
_TOOL_PREFIX = "choose_"
_EMPTY_OBJECT: JSONObject = {"type": "object", "properties": {}}
_PY_TYPES = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "list": "array",
    "dict": "object",
}


@dataclass(frozen=True, slots=True)
class Choice:
    """One option. ``schema`` is the fields of a schema option or the arguments of a method."""

    name: str
    description: str = ""
    value: object = UNSET
    method: Callable[..., object] | None = None
    schema: JSONObject | None = None

    @property
    def kind(self) -> str:
        if self.method is not None:
            return "method"
        if self.schema is not None:
            return "schema"
        return "value"

    def fields_schema(self) -> JSONObject:
        return self.schema if self.schema is not None else _EMPTY_OBJECT


@dataclass(frozen=True, slots=True)
class Pick:
    """A valid pick: the option and the fields the model gave with it."""

    choice: Choice
    fields: JSONObject


@dataclass(frozen=True, slots=True)
class ChoiceSet:
    """The options of one ``choices`` and how many re-picks an invalid pick gets."""

    options: dict[str, Choice] = field(default_factory=dict)
    max_repicks: int = 1


def _annotation_schema(annotation: object) -> JSONObject:
    name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    origin = getattr(annotation, "__origin__", None)
    if origin is not None:
        name = getattr(origin, "__name__", name)
    base = str(name).split("[", 1)[0]
    return {"type": _PY_TYPES[base]} if base in _PY_TYPES else {}


def _signature_schema(fn: Callable[..., object]) -> JSONObject:
    """An arguments schema from ``fn``'s parameters: required when they have no default."""
    try:
        sig = inspect.signature(fn, eval_str=True)
    except (NameError, TypeError, ValueError):
        sig = inspect.signature(fn)
    props: JSONObject = {}
    required: list[JSONValue] = []
    for param in sig.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or param.name == "self":
            continue
        props[param.name] = (
            {} if param.annotation is param.empty else _annotation_schema(param.annotation)
        )
        if param.default is param.empty:
            required.append(param.name)
    return {"type": "object", "properties": props, "required": required}


def _choice(name: object, spec: object) -> Choice:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"choice names must match [A-Za-z0-9_-]{{1,56}}, not {name!r}")
    if spec is None:
        return Choice(name, value=name)
    if isinstance(spec, str):
        return Choice(name, description=spec, value=name)
    if isinstance(spec, Choice):
        return spec
    if callable(spec) and not isinstance(spec, Mapping):
        return Choice(
            name,
            (inspect.getdoc(spec) or "").split("\n")[0],
            method=spec,
            schema=_signature_schema(spec),
        )
    if not isinstance(spec, Mapping):
        raise TypeError(f"choice {name!r}: expected a mapping, string or callable")
    unknown = set(spec) - {"description", "value", "method", "schema", "name"}
    if unknown:
        raise TypeError(f"choice {name!r}: unknown keys {sorted(unknown)}")
    description = str(spec.get("description", ""))
    method = spec.get("method")
    schema = spec.get("schema")
    if method is not None and not callable(method):
        raise TypeError(f"choice {name!r}: 'method' must be callable")
    if "value" in spec and (method is not None or schema is not None):
        raise TypeError(f"choice {name!r}: 'value' cannot be combined with 'method' or 'schema'")
    if schema is not None:
        validator_for(schema, what=f"schema of choice {name!r}")
    if method is not None:
        return Choice(name, description, method=method, schema=schema or _signature_schema(method))
    if schema is not None:
        return Choice(name, description, schema=schema)
    return Choice(name, description, value=spec.get("value", name))


_cache: dict[int, tuple[object, ChoiceSet]] = {}


def normalize_choices(choices: object) -> ChoiceSet:
    """A ``ChoiceSet`` from a mapping of name → option, a list of names or option mappings."""
    if isinstance(choices, ChoiceSet):
        return choices
    hit = _cache.get(id(choices))
    if hit is not None and hit[0] is choices:
        return hit[1]
    options: dict[str, Choice] = {}
    if isinstance(choices, Mapping):
        for name, spec in choices.items():
            options[name] = _choice(name, spec)
    elif isinstance(choices, Sequence) and not isinstance(choices, str):
        for item in choices:
            if isinstance(item, Mapping):
                options[str(item.get("name"))] = _choice(item.get("name"), item)
            elif isinstance(item, Choice):
                options[item.name] = item
            else:
                options[str(item)] = _choice(item, None)
    else:
        raise TypeError("choices must be a mapping of options or a list")
    if not options:
        raise ValueError("choices needs at least one option")
    result = ChoiceSet(options)
    if len(_cache) > 256:
        _cache.clear()
    _cache[id(choices)] = (choices, result)
    return result


def _branch(choice: Choice) -> JSONObject:
    """The schema of a whole pick of ``choice``: the decision plus the option's fields."""
    fields = choice.fields_schema()
    tag: JSONObject = {"decision": {"const": choice.name}}
    if "$ref" not in fields and fields.get("type", "object") == "object":
        # The option's schema was checked when the choices were built: these are JSON
        # Schema's object and array.
        properties = fields.get("properties", {})
        required = fields.get("required", [])
        branch = {k: v for k, v in fields.items() if k not in ("properties", "required")}
        branch["type"] = "object"
        branch["properties"] = {**tag, **(properties if isinstance(properties, dict) else {})}
        branch["required"] = ["decision", *(required if isinstance(required, list) else [])]
        return branch
    head: JSONObject = {"type": "object", "properties": tag, "required": ["decision"]}
    return {"allOf": [head, dict(fields)]}


def find_last_pick(text: str) -> JSONObject | None:
    """The last JSON object in ``text`` that has a ``decision`` key."""
    decoder = json.JSONDecoder()
    best: tuple[int, JSONObject] | None = None
    for match in re.finditer(r"\{", text):
        try:
            value, end = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(value, dict) and "decision" in value and (best is None or end > best[0]):
            best = (end, value)
    return best[1] if best else None


def _issue_kind(issue: str) -> str:
    if "is a required property" in issue:
        return "missing_args"
    if "is not of type" in issue:
        return "wrong_type"
    if "is not one of" in issue or "was expected" in issue:
        return "not_in_enum"
    return "bad_args"


class ChoiceTerminal:
    """Ends a turn with a validated pick. Re-picks do not spend the recovery budget."""

    budgeted = False
    picks_choice = True

    def __init__(self, choice_set: ChoiceSet, caps: Capabilities) -> None:
        self.choices = choice_set
        self.max_redos = choice_set.max_repicks
        if caps.native_json_schema:
            self.mode = "native"
        elif caps.tools and caps.forced_tool_choice:
            self.mode = "tool"
        else:
            self.mode = "text"
        self.name = f"choices:{self.mode}"
        opts = choice_set.options.values()
        self.response_format: JSONObject | None = None
        self.hidden_tools: tuple[ToolSpec, ...] = ()
        if self.mode == "native":
            self.response_format = {
                "name": "decision",
                "schema": {"anyOf": [_branch(c) for c in opts]},
                "strict": False,
                "description": "The next step: one of the options.",
            }
        elif self.mode == "tool":
            self.hidden_tools = tuple(
                ToolSpec(
                    _TOOL_PREFIX + c.name,
                    c.description or f"Choose {c.name}.",
                    dict(c.fields_schema()),
                )
                for c in opts
            )
        self.system_suffix = self._menu()

    def _menu(self) -> str:
        lines = ["When you have finished, choose the next step. Options:"]
        for c in self.choices.options.values():
            line = f"- {c.name}" + (f": {c.description}" if c.description else "")
            if c.schema is not None:
                line += f" (fields: {json.dumps(c.fields_schema(), sort_keys=True)})"
            lines.append(line)
        if self.mode == "tool":
            lines.append(f"Choose by calling exactly one {_TOOL_PREFIX}<option> tool, alone.")
        else:
            lines.append(
                'End your reply with one JSON object: {"decision": "<option>", ...fields}.'
            )
        return "\n".join(lines)

    def tool_choice(self, has_user_tools: bool) -> str | JSONObject | Unset:
        if self.mode != "tool" or has_user_tools:
            return UNSET
        if len(self.hidden_tools) == 1:
            return {"type": "function", "name": self.hidden_tools[0].name}
        return "required"

    def check(self, pick: JSONValue) -> tuple[Choice, JSONObject]:
        """The option and fields of a valid pick; ``DecisionError`` naming the problem."""
        names = ", ".join(self.choices.options)
        if not isinstance(pick, dict) or "decision" not in pick:
            raise DecisionError(
                f"no pick found; expected one of: {names}",
                kind="no_pick",
                issues=['$: no {"decision": ...} object'],
            )
        choice = (
            self.choices.options.get(pick["decision"])
            if isinstance(pick["decision"], str)
            else None
        )
        if choice is None:
            raise DecisionError(
                f"unknown option {pick['decision']!r}; expected one of: {names}",
                kind="unknown_option",
                issues=[f"$.decision: {pick['decision']!r} is not one of: {names}"],
            )
        fields = {k: v for k, v in pick.items() if k != "decision"}
        declared = choice.fields_schema().get("properties", {})
        if (
            set(fields) == {"arguments"}
            and isinstance(fields["arguments"], dict)
            and not (isinstance(declared, dict) and "arguments" in declared)
        ):
            fields = dict(fields["arguments"])  # a common shape; accept it
        if choice.kind == "value":
            return choice, fields
        issues = validator_for(choice.fields_schema()).errors(fields)
        if issues:
            raise DecisionError(
                f"invalid fields for option {choice.name!r}",
                kind=_issue_kind(issues[0]),
                issues=issues,
            )
        return choice, fields

    def accept(self, result: RuntimeResult) -> Done | Redo | None:
        calls = result.tool_calls
        picks = [c for c in calls if c.name.startswith(_TOOL_PREFIX) and c.name in self._tool_names]
        if calls and not picks:
            return None
        try:
            if picks:
                if len(calls) > 1:
                    raise DecisionError(
                        "pick exactly one option, alone in its turn",
                        kind="ambiguous",
                        issues=[f"{len(calls)} tool calls"],
                    )
                try:
                    fields = json.loads(picks[0].arguments or "{}")
                except ValueError as exc:
                    raise DecisionError(
                        "the pick's arguments are not JSON", kind="bad_args", issues=[str(exc)]
                    ) from None
                if not isinstance(fields, dict):
                    fields = {"arguments": fields}
                pick: JSONValue = {"decision": picks[0].name[len(_TOOL_PREFIX) :], **fields}
            else:
                pick = find_last_pick(result.content)
            choice, fields = self.check(pick)
        except DecisionError as exc:
            return self._redo(result, exc)
        return Done(Pick(choice, fields))

    @property
    def _tool_names(self) -> frozenset[str]:
        return frozenset(t.name for t in self.hidden_tools)

    def _redo(self, result: RuntimeResult, error: DecisionError) -> Redo:
        feedback = (
            f"That pick is invalid ({error.kind}): {error}\n"
            + "".join(f"- {i}\n" for i in error.issues)
            + "Pick again."
        )
        assistant = assistant_reply(result)
        if result.tool_calls:
            replies = [
                Message("tool", feedback, tool_call_id=c.id, name=c.name, is_error=True)
                for c in result.tool_calls
            ]
            return Redo([assistant, *replies], error.kind, error.issues, error)
        return Redo([assistant, Message("user", feedback)], error.kind, error.issues, error)


async def resolve_choice(choice: Choice, fields: JSONObject) -> object:
    """What ``exec`` returns for a valid pick."""
    if choice.method is not None:
        is_async = inspect.iscoroutinefunction(choice.method)
        return await call_maybe_async(choice.method, is_async, fields)
    if choice.schema is not None:
        return {"decision": choice.name, **fields}
    return None if isinstance(choice.value, Unset) else choice.value
