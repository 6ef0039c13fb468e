"""Structured output: the response_format envelope, mode selection, strict parsing, repair.

Modes, chosen from the runtime's declared ``Capabilities`` before any request:

- ``native``: the provider constrains the reply (``response_format`` kwarg).
- ``tool``: a hidden ``submit_result`` tool carries the value (``fallback: auto``).
- ``prompt``: an instruction in the system prompt (only with ``fallback: prompt``).

Whatever the mode, the value is parsed strictly and validated locally against the original
schema; a failure becomes a repair turn that feeds the issues back to the model.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from openprogram_yaml.errors import (
    StructuredOutputError,
    StructuredOutputGenerationError,
    StructuredOutputSchemaError,
    StructuredOutputUnsupportedError,
    StructuredOutputValidationError,
)
from openprogram_yaml.json_types import JSONObject, JSONValue
from openprogram_yaml.runtime.content import assistant_reply
from openprogram_yaml.runtime.turn_end import UNSET, Done, Redo, Unset
from openprogram_yaml.runtime.validation import SchemaValidator, reference_issues
from openprogram_yaml.runtime.validators import validator_for
from openprogram_yaml.runtimes.protocol import (
    UNDECLARED_CAPABILITIES,
    Capabilities,
    Message,
    RuntimeResult,
    ToolSpec,
)

__all__ = [
    "DEFAULT_VALIDATION_RETRIES",
    "SUBMIT_TOOL",
    "JsonSchemaOutput",
    "StructuredTerminal",
    "normalize_response_format",
    "parse_json_strict",
    "select_mode",
]

DEFAULT_VALIDATION_RETRIES = 2
SUBMIT_TOOL = "submit_result"
_ENVELOPE_KEYS = frozenset(
    {"schema", "name", "description", "strict", "fallback", "max_validation_retries"}
)
_FALLBACKS = ("auto", "none", "prompt")
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _schema_error(message: str) -> StructuredOutputSchemaError:
    return StructuredOutputSchemaError(message, issues=[message])


@dataclass(frozen=True, slots=True)
class JsonSchemaOutput:
    """A structured-output request: the JSON Schema the answer must match, and how to get it.

    ``fallback`` is ``auto`` (native output, else a hidden submit tool where the runtime can
    force one), ``prompt`` (also allow a prompt instruction alone) or ``none`` (native only).
    Checked when built: ``StructuredOutputSchemaError`` for an invalid schema or option.
    """

    schema: Mapping[str, JSONValue] | bool
    name: str = "response"
    description: str = ""
    strict: bool = True
    fallback: str = "auto"
    max_validation_retries: int | None = None
    validator: SchemaValidator = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        name: object = self.name
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise _schema_error(
                f"response_format.name must match [A-Za-z0-9_-]{{1,64}}, not {name!r}"
            )
        if not isinstance(self.description, str):
            raise _schema_error("response_format.description must be a string")
        if not isinstance(self.strict, bool):
            raise _schema_error("response_format.strict must be true or false")
        if self.fallback not in _FALLBACKS:
            raise _schema_error(
                f"response_format.fallback must be one of {_FALLBACKS}, not {self.fallback!r}"
            )
        retries: object = self.max_validation_retries
        if retries is not None and (
            isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 2
        ):
            raise _schema_error(f"max_validation_retries must be 0, 1 or 2, not {retries!r}")
        schema: object = self.schema
        if not isinstance(schema, Mapping | bool):
            raise _schema_error("response_format.schema must be a JSON Schema object")
        # Refused here, not when a reply is checked: a remote $ref or a $ref loop would
        # otherwise fail every attempt, after the model was called for each.
        refs = reference_issues(schema)
        if refs:
            raise StructuredOutputSchemaError(
                "the response schema has references that cannot be used", issues=refs
            )
        object.__setattr__(self, "validator", validator_for(schema, what="response schema"))

    def native_payload(self) -> JSONObject:
        """The ``response_format`` kwarg a runtime with native structured output receives."""
        return {
            "name": self.name,
            "schema": _json_schema(self.schema),
            "strict": self.strict,
            "description": self.description,
        }


def _json_schema(schema: Mapping[str, JSONValue] | bool) -> JSONObject | bool:
    return dict(schema) if isinstance(schema, Mapping) else schema


def _from_envelope(env: Mapping[str, object]) -> JsonSchemaOutput:
    unknown = sorted(k for k in env if k not in _ENVELOPE_KEYS)
    if unknown or "schema" not in env:
        what = f"unknown keys {unknown}" if unknown else "no 'schema'"
        raise _schema_error(f"the response_format envelope has {what}")
    options: dict[str, Any] = {k: env[k] for k in _ENVELOPE_KEYS if k in env}
    # A compiled method passes the same schema object on every call: the output made for
    # that schema and those options is made once (checking the schema's references walked
    # it on every call). The schema is compared with a copy kept of it, so one a caller
    # changed in place between calls is not answered from before the change.
    schema = options["schema"]
    rest = [(k, type(v), v) for k, v in sorted(options.items()) if k != "schema"]
    key: tuple[object, ...] | None = (id(schema), *rest)
    try:
        hit = _envelopes.get(key) if key is not None else None
    except TypeError:  # an option that is not a plain value: checked (and refused) below
        hit = key = None
    if hit is not None and _unchanged(hit, schema):
        return hit[2]
    result = JsonSchemaOutput(**options)
    if key is not None:
        _keep(_envelopes, key, schema, result)
    return result


#: Outputs already made, by the identity of what they were made from: (that object, a deep
#: copy of it as it was, the output). A hit must be the same object, still equal to its copy.
_Kept = tuple[object, object, JsonSchemaOutput]
_envelopes: dict[tuple[object, ...], _Kept] = {}
_normalized: dict[int, _Kept] = {}


def _unchanged(hit: _Kept, value: object) -> bool:
    return hit[0] is value and hit[1] == value


def _keep(kept: dict[Any, _Kept], key: object, value: object, result: JsonSchemaOutput) -> None:
    try:
        snapshot = copy.deepcopy(value)
    except Exception:  # a value that cannot be copied is simply not kept
        return
    if len(kept) > 512:
        kept.clear()
    kept[key] = (value, snapshot, result)


def normalize_response_format(value: object) -> JsonSchemaOutput:
    """A ``JsonSchemaOutput`` from a bare JSON Schema, a ``JsonSchemaOutput``, or an envelope.

    Envelopes: ``{"type": "json_schema", "schema": S, ...options}`` (the seed's),
    ``{"schema": S, ...options}`` (every key an option), and OpenAI's
    ``{"type": "json_schema", "json_schema": {"schema": S, ...options}}``. The options are
    ``name``, ``description``, ``strict``, ``fallback`` and ``max_validation_retries``.
    """
    if isinstance(value, JsonSchemaOutput):
        return value
    hit = _normalized.get(id(value))
    if hit is not None and _unchanged(hit, value):
        return hit[2]
    if not isinstance(value, Mapping):
        raise StructuredOutputSchemaError(
            "response_format must be a JSON Schema object or an envelope with 'schema'",
            issues=[f"got {type(value).__name__}"],
        )
    if value.get("type") == "json_schema":
        inner = value.get("json_schema")
        if isinstance(inner, Mapping) and "schema" not in value:
            if set(value) != {"type", "json_schema"}:
                raise _schema_error("put the envelope's options inside 'json_schema'")
            result = _from_envelope(inner)
        else:
            result = _from_envelope({k: v for k, v in value.items() if k != "type"})
    elif "schema" in value and _ENVELOPE_KEYS.issuperset(value):
        result = _from_envelope(value)
    else:
        result = JsonSchemaOutput(schema=value)
    _keep(_normalized, id(value), value, result)
    return result


def select_mode(fmt: JsonSchemaOutput, caps: Capabilities) -> str:
    """``native``, ``tool`` or ``prompt``; ``StructuredOutputUnsupportedError`` otherwise.

    Fails closed: a runtime that declares no capabilities (``UNDECLARED_CAPABILITIES``) gets
    neither the hidden tool nor native output, only the prompt fallback asked for by name.
    """
    if caps.native_json_schema:
        return "native"
    if fmt.fallback == "prompt":
        return "prompt"
    if caps is UNDECLARED_CAPABILITIES:
        why = (
            "the runtime declares no capabilities(), so no structured-output mode is known "
            "to work (declare Capabilities, or set fallback: prompt for a prompt instruction)"
        )
    elif fmt.fallback == "auto" and caps.tools and caps.forced_tool_choice:
        return "tool"
    elif fmt.fallback == "none":
        why = "this runtime has no native structured output and fallback is 'none'"
    else:
        why = (
            "this runtime has no native structured output and cannot force a tool call "
            "(set fallback: prompt for a prompt instruction)"
        )
    raise StructuredOutputUnsupportedError(
        why, issues=[f"fallback={fmt.fallback}", f"capabilities={caps}"]
    )


class _Unparsable(ValueError):
    """A reason the reply is not strict JSON, worded without quoting the reply."""


def _reject_constant(name: str) -> NoReturn:
    raise _Unparsable("NaN and Infinity are not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (math.inf, -math.inf):  # 1e999: Infinity by another name
        raise _Unparsable("a number is too large for a float")
    return value


def _no_duplicate_keys(pairs: list[tuple[str, JSONValue]]) -> JSONObject:
    out: JSONObject = {}
    for key, val in pairs:
        if key in out:
            raise _Unparsable("an object has the same key twice")
        out[key] = val
    return out


#: One decoder for ``parse_json_strict`` (``json.loads`` with hooks builds one a call).
_STRICT = json.JSONDecoder(
    parse_constant=_reject_constant,
    parse_float=_finite_float,
    object_pairs_hook=_no_duplicate_keys,
)


def parse_json_strict(text: str) -> JSONValue:
    """Parse exactly one JSON value: no code fences, no trailing text, no NaN, no duplicate keys."""
    if not text.strip():
        raise StructuredOutputValidationError(
            "the reply was empty", code="invalid_json", issues=["$: the reply was empty"]
        )
    try:
        value: JSONValue = (
            _STRICT.decode(text)
            if not text.startswith("\ufeff")
            else json.loads(text)  # refused with json.loads' own words for a BOM
        )
    except json.JSONDecodeError as exc:
        # ``msg`` names the rule ("Expecting value"); the position says where, and neither
        # quotes the reply.
        where = f"line {exc.lineno} column {exc.colno}"
        raise StructuredOutputValidationError(
            "the reply is not valid JSON", code="invalid_json", issues=[f"$: {exc.msg} at {where}"]
        ) from None
    except _Unparsable as exc:
        raise StructuredOutputValidationError(
            "the reply is not valid JSON", code="invalid_json", issues=[f"$: {exc}"]
        ) from None
    except ValueError:  # int()'s limit on digits (sys.get_int_max_str_digits, 4,300)
        raise StructuredOutputValidationError(
            "the reply is not valid JSON",
            code="invalid_json",
            issues=["$: a number has more digits than the JSON decoder reads"],
        ) from None
    except RecursionError:
        raise StructuredOutputValidationError(
            "the reply is not valid JSON",
            code="invalid_json",
            issues=["$: nested deeper than the JSON decoder reads"],
        ) from None
    return value


def _submit_parameters(schema: Mapping[str, JSONValue] | bool) -> tuple[JSONObject, bool]:
    """Tool parameters for the submit tool, and whether the value is wrapped in ``value``."""
    if isinstance(schema, Mapping) and schema.get("type") == "object":
        return dict(schema), False
    wrapper: JSONObject = {
        "type": "object",
        "properties": {"value": _json_schema(schema)},
        "required": ["value"],
        "additionalProperties": False,
    }
    if isinstance(schema, Mapping):
        # Local refs like "#/$defs/x" must still resolve once the schema sits under "value".
        for key in ("$defs", "definitions"):
            if key in schema:
                wrapper[key] = schema[key]
    return wrapper, True


class StructuredTerminal:
    """Ends a turn with a validated JSON value; repairs share the exec's recovery budget."""

    budgeted = True
    picks_choice = False

    def __init__(self, fmt: JsonSchemaOutput, mode: str, max_validation_retries: int) -> None:
        self.fmt = fmt
        self.mode = mode
        self.name = f"structured:{mode}"
        self.max_redos = (
            fmt.max_validation_retries
            if fmt.max_validation_retries is not None
            else max_validation_retries
        )
        self.response_format = fmt.native_payload() if mode == "native" else None
        self.hidden_tools: tuple[ToolSpec, ...] = ()
        self._wrapped = False
        if mode == "tool":
            params, self._wrapped = _submit_parameters(fmt.schema)
            self.hidden_tools = (
                ToolSpec(
                    name=SUBMIT_TOOL,
                    description=fmt.description or "Submit the final answer.",
                    parameters=params,
                    strict=fmt.strict,
                ),
            )
            self.system_suffix = (
                f"When you have the final answer, call the `{SUBMIT_TOOL}` tool with it, "
                "on its own in that turn. Do not give the final answer as plain text."
            )
        elif mode == "prompt":
            self.system_suffix = (
                "Reply with only a JSON value that matches this JSON Schema: no code fences, "
                "no comments, no text before or after it.\n"
                + json.dumps(fmt.schema, sort_keys=True)
            )
        else:
            self.system_suffix = ""

    def tool_settings(
        self,
        offered: Collection[str],
        tool_choice: str | JSONObject | Unset,
        parallel_tool_calls: bool | Unset,
    ) -> bool | Unset:
        """The ``parallel_tool_calls`` to send. On the hidden-tool path that is ``False``
        (the submission must stand alone in its turn), and caller settings the hidden tool
        cannot honour are refused rather than forwarded."""
        if self.mode != "tool":
            return parallel_tool_calls
        if SUBMIT_TOOL in offered:
            raise StructuredOutputUnsupportedError(
                f"a tool is named {SUBMIT_TOOL!r}, the name structured output reserves for "
                "its hidden submit tool; rename the tool",
                issues=[f"tools: {SUBMIT_TOOL}"],
            )
        conflicts = []
        if tool_choice == "none" or isinstance(tool_choice, dict):
            conflicts.append(
                f"tool_choice={tool_choice!r} would keep the model from calling {SUBMIT_TOOL}"
            )
        if parallel_tool_calls is True:
            conflicts.append(f"parallel_tool_calls=True: {SUBMIT_TOOL} must be alone in its turn")
        if conflicts:
            raise StructuredOutputUnsupportedError(
                "this runtime has no native structured output, and the hidden submit tool "
                "that stands in for it cannot honour: " + "; ".join(conflicts),
                issues=conflicts,
            )
        return False

    def tool_choice(self, has_user_tools: bool) -> str | JSONObject | Unset:
        if self.mode == "tool" and not has_user_tools:
            return {"type": "function", "name": SUBMIT_TOOL}
        return UNSET

    def out_of_iterations(self, max_iterations: int) -> StructuredOutputValidationError:
        """The error when the tool loop ends with no structured answer submitted."""
        return StructuredOutputValidationError(
            f"exec() hit max_iterations={max_iterations} before the model submitted "
            "its structured answer",
            code="missing_submission",
            issues=[f"$: no answer within max_iterations={max_iterations}"],
        )

    def _check(self, value: JSONValue) -> list[str]:
        return self.fmt.validator.rule_errors(value)

    def accept(self, result: RuntimeResult) -> Done | Redo | None:
        if result.refusal is not None or result.finish_reason in ("refusal", "content_filter"):
            raise StructuredOutputGenerationError(
                "the model refused to produce the structured reply",
                code="refusal",
                # The refusal text is the model's own words: diagnostics never quote them.
                issues=[f"$: refused (finish_reason={result.finish_reason})"],
            )
        if self.mode == "tool":
            return self._accept_submission(result)
        if result.tool_calls:
            return None
        if result.finish_reason == "length":
            return self._incomplete(result)
        try:
            value = parse_json_strict(result.content)
        except StructuredOutputValidationError as exc:
            return self._redo_text(result, exc)
        issues = self._check(value)
        if issues:
            return self._redo_text(
                result,
                StructuredOutputValidationError(
                    "the reply does not match the response schema",
                    code="validation_failed",
                    issues=issues,
                ),
            )
        return Done(value)

    def _incomplete(self, result: RuntimeResult) -> Redo:
        error = StructuredOutputGenerationError(
            "the structured reply was cut off before it was complete",
            code="incomplete",
            issues=["finish_reason=length"],
        )
        note = "Your previous reply was cut off. Reply again, completely and more concisely."
        messages = [
            assistant_reply(result),
            Message("user", note),
        ]
        return Redo(messages, error.code, error.issues, error)

    def _redo_text(self, result: RuntimeResult, error: StructuredOutputError) -> Redo:
        feedback = (
            "Your reply could not be used:\n"
            + "\n".join(f"- {issue}" for issue in error.issues)
            + "\nReply again with only the corrected JSON value."
        )
        messages = [Message("assistant", result.content), Message("user", feedback)]
        return Redo(messages, error.code, error.issues, error)

    def _accept_submission(self, result: RuntimeResult) -> Done | Redo | None:
        submits = [c for c in result.tool_calls if c.name == SUBMIT_TOOL]
        if not submits:
            if result.tool_calls:
                return None
            if result.finish_reason == "length":
                return self._incomplete(result)
            error = StructuredOutputValidationError(
                f"the model answered without calling {SUBMIT_TOOL}",
                code="missing_submission",
                issues=[f"$: no {SUBMIT_TOOL} call in the final reply"],
            )
            note = f"Call the `{SUBMIT_TOOL}` tool with your final answer."
            messages = [Message("assistant", result.content), Message("user", note)]
            return Redo(messages, error.code, error.issues, error)
        assistant = assistant_reply(result)
        if len(result.tool_calls) > 1:
            error = StructuredOutputValidationError(
                f"{SUBMIT_TOOL} must be the only tool call in its turn",
                code="mixed_submission",
                issues=[f"$: {len(result.tool_calls)} tool calls alongside {SUBMIT_TOOL}"],
            )
            replies = [
                Message(
                    "tool",
                    f"Not run: {error}. Nothing was executed.",
                    tool_call_id=c.id,
                    name=c.name,
                    is_error=True,
                )
                for c in result.tool_calls
            ]
            return Redo([assistant, *replies], error.code, error.issues, error)
        call = submits[0]
        try:
            value = parse_json_strict(call.arguments)
            if self._wrapped:
                if not isinstance(value, dict) or "value" not in value:
                    raise StructuredOutputValidationError(
                        "the submission has no 'value'",
                        code="validation_failed",
                        issues=["$: 'value' is a required property"],
                    )
                value = value["value"]
            issues = self._check(value)
            if issues:
                raise StructuredOutputValidationError(
                    "the submission does not match the response schema",
                    code="validation_failed",
                    issues=issues,
                )
        except StructuredOutputValidationError as exc:
            feedback = (
                "Rejected:\n"
                + "\n".join(f"- {issue}" for issue in exc.issues)
                + f"\nCall {SUBMIT_TOOL} again with corrected arguments."
            )
            reply = Message("tool", feedback, tool_call_id=call.id, name=call.name, is_error=True)
            return Redo([assistant, reply], exc.code, exc.issues, exc)
        return Done(value)
