"""``choices``: the turn ends by picking one option, which decides what ``exec`` returns.

A pick is ``{"call": <option>, "args": {...}}`` (``runtime.pick_text`` finds it in a reply
and writes the menu). Where the runtime can constrain output it is constrained, with the same
result: natively by a schema of the pick, or by forcing one hidden ``choose_<option>`` tool
call. An invalid pick gets one re-pick by default, then ``DecisionError``. The result is the
option's value, the return value of its function (called with the pick's args), or
``{"decision": name, **fields}`` for an option with a schema.

Options come from Python callers as containers (``normalize_choices``) or, from YAML, as
``Choice`` objects that ``run/method.py`` builds.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from openprogram_yaml.errors import DecisionError
from openprogram_yaml.json_types import JSONObject
from openprogram_yaml.runtime.content import assistant_reply
from openprogram_yaml.runtime.option_schema import fields_schema, signature_schema
from openprogram_yaml.runtime.pick_text import call_name, find_pick, menu
from openprogram_yaml.runtime.toolloop import call_maybe_async
from openprogram_yaml.runtime.turn_end import UNSET, Done, Redo, Unset
from openprogram_yaml.runtime.validators import validator_for
from openprogram_yaml.runtimes.protocol import Capabilities, Message, RuntimeResult, ToolSpec

__all__ = ["Choice", "ChoiceSet", "ChoiceTerminal", "Pick", "normalize_choices"]

_NAME = re.compile(r"[A-Za-z0-9_-]{1,56}")
_TOOL_PREFIX = "choose_"
_EMPTY_OBJECT: JSONObject = {"type": "object", "properties": {}}
#: How much of a reply a ``DecisionError`` keeps.
_REPLY_HEAD = 200


@dataclass(frozen=True, slots=True)
class Choice:
    """One option: a value, a function (``method``) or a schema of fields.

    ``schema`` is the fields of a schema option or the arguments of a function.
    """

    name: str
    description: str = ""
    value: object = UNSET
    method: Callable[..., object] | None = None
    schema: JSONObject | None = None

    @property
    def kind(self) -> str:
        if self.method is not None:
            return "function"
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


def _checked_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"choice names must match [A-Za-z0-9_-]{{1,56}}, not {name!r}")
    return name


def _function(name: str, fn: Callable[..., object], description: str | None = None) -> Choice:
    if description is None:
        description = (inspect.getdoc(fn) or "").split("\n")[0]
    return Choice(name, description, method=fn, schema=signature_schema(fn))


def _schema_option(name: str, description: str, schema: object) -> Choice:
    fields = fields_schema(schema, where=f"schema of choice {name!r}")
    return Choice(name, description, schema=fields)


def _from_mapping(name: str, handler: object) -> Choice:
    """An option of the dict form ``{name: handler}``."""
    if isinstance(handler, Choice):
        return replace(handler, name=name)
    if callable(handler):
        return _function(name, handler)
    if isinstance(handler, tuple) and len(handler) == 2:
        first, second = handler
        if callable(first) and isinstance(second, str):
            return _function(name, first, second)
        if isinstance(second, str):
            return Choice(name, second, value=first)
        if isinstance(first, str) and isinstance(second, Mapping):
            return _schema_option(name, first, second)
    # A string here is the value, not a description: ``{"no": "declined"}`` returns "declined".
    return Choice(name, value=handler)


def _from_item(item: object) -> Choice:
    """An option of the list form."""
    if isinstance(item, Choice):
        return item
    if isinstance(item, str):
        return Choice(_checked_name(item), value=item)
    if callable(item):
        return _function(_checked_name(getattr(item, "__name__", None)), item)
    if isinstance(item, tuple) and len(item) in (2, 3):
        head, description = item[0], item[1]
        if isinstance(description, str):
            if callable(head) and len(item) == 2:
                return _function(_checked_name(getattr(head, "__name__", None)), head, description)
            if isinstance(head, str):
                name = _checked_name(head)
                if len(item) == 3:
                    return _schema_option(name, description, item[2])
                return Choice(name, description, value=name)
    raise TypeError(
        "a choices list holds functions, (function, 'description'), 'name', "
        f"('name', 'description') or ('name', 'description', schema); not {item!r}"
    )


_cache: dict[int, tuple[object, ChoiceSet]] = {}


def normalize_choices(choices: object) -> ChoiceSet:
    """A ``ChoiceSet`` from the seed's containers.

    A dict ``{name: handler}``: a callable is a function option, ``(value, "description")``
    a value with a description, ``("description", schema)`` a schema option, anything else a
    value. A list: functions, ``(function, "description")``, ``"name"``,
    ``("name", "description")`` or ``("name", "description", schema)``.
    """
    if isinstance(choices, ChoiceSet):
        return choices
    hit = _cache.get(id(choices))
    if hit is not None and hit[0] is choices:
        return hit[1]
    options: dict[str, Choice] = {}
    if isinstance(choices, Mapping):
        for name, handler in choices.items():
            options[name] = _from_mapping(_checked_name(name), handler)
    elif isinstance(choices, Sequence) and not isinstance(choices, str):
        for item in choices:
            choice = _from_item(item)
            if choice.name in options:
                raise ValueError(f"choices name {choice.name!r} twice")
            options[choice.name] = choice
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
    """The schema of a whole pick of ``choice``: its name and its args."""
    return {
        "type": "object",
        "properties": {"call": {"const": choice.name}, "args": dict(choice.fields_schema())},
        "required": ["call", "args"],
        "additionalProperties": False,
    }


def _issue_kind(issue: str) -> str:
    if "is a required property" in issue:
        return "missing_args"
    if "is not of type" in issue:
        return "wrong_type"
    if "is not one of" in issue or "was expected" in issue:
        return "not_in_enum"
    return "bad_args"


def _declared(choice: Choice, args: JSONObject) -> JSONObject:
    """The args the option declares; the rest are dropped, as the seed's options do.

    A function with ``**kwargs`` (``additionalProperties`` set and not false) keeps them."""
    if choice.kind == "value":
        return {}
    schema = choice.fields_schema()
    extra = schema.get("additionalProperties")
    props = schema.get("properties")
    if (extra is not None and extra is not False) or not isinstance(props, dict):
        return args
    return {k: v for k, v in args.items() if k in props}


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
        self.system_suffix = menu(
            ((c.name, c.description, c.fields_schema()) for c in opts),
            tool_prefix=_TOOL_PREFIX if self.mode == "tool" else None,
        )

    def tool_choice(self, has_user_tools: bool) -> str | JSONObject | Unset:
        if self.mode != "tool" or has_user_tools:
            return UNSET
        if len(self.hidden_tools) == 1:
            return {"type": "function", "name": self.hidden_tools[0].name}
        return "required"

    def check(self, pick: JSONObject | None) -> Pick:
        """The option and args of a valid pick; ``DecisionError`` naming the problem."""
        names = ", ".join(self.choices.options)
        called = call_name(pick) if pick is not None else None
        if pick is None or called is None:
            raise DecisionError(
                f"no pick found; expected one of: {names}",
                kind="no_pick",
                issues=['$: no {"call": "<option>", "args": {...}} object'],
            )
        key, name = called
        choice = self.choices.options.get(name) if isinstance(name, str) else None
        if choice is None:
            raise DecisionError(
                f"unknown option {name!r}; expected one of: {names}",
                kind="unknown_call",
                issues=[f"$.{key}: {name!r} is not one of: {names}"],
            )
        # "arguments" is what tool-call habits make models write; it means args.
        args = pick.get("args", pick.get("arguments", {}))
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise DecisionError(
                f"the args of option {choice.name!r} must be an object",
                kind="bad_args",
                issues=[f"$.args: {type(args).__name__} is not an object"],
            )
        fields = _declared(choice, args)
        if choice.kind != "value":
            issues = validator_for(choice.fields_schema()).errors(fields)
            if issues:
                raise DecisionError(
                    f"invalid args for option {choice.name!r}",
                    kind=_issue_kind(issues[0]),
                    issues=[f"$.args{i[1:]}" if i.startswith("$") else i for i in issues],
                )
        return Pick(choice, fields)

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
                    args = json.loads(picks[0].arguments or "{}")
                except (ValueError, RecursionError) as exc:
                    raise DecisionError(
                        "the pick's arguments are not JSON", kind="bad_args", issues=[str(exc)]
                    ) from None
                pick: JSONObject | None = {
                    "call": picks[0].name[len(_TOOL_PREFIX) :],
                    "args": args,
                }
            else:
                pick = find_pick(result.content)
            return Done(self.check(pick))
        except DecisionError as exc:
            exc.reply = result.content[:_REPLY_HEAD]
            return self._redo(result, exc)

    @property
    def _tool_names(self) -> frozenset[str]:
        return frozenset(t.name for t in self.hidden_tools)

    def _redo(self, result: RuntimeResult, error: DecisionError) -> Redo:
        """The model gets its reply back, the reason, and the menu again."""
        feedback = (
            f"That pick is invalid ({error.kind}): {error}\n"
            + "".join(f"- {i}\n" for i in error.issues)
            + "Pick again.\n\n"
            + self.system_suffix
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
