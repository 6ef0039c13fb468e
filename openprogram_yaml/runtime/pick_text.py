"""The pick as text: finding ``{"call": ..., "args": {...}}`` in a reply, and the menu that
asks for it.

Extraction follows the seed: the first fenced block (```` ```json ```` or bare ```` ``` ````)
holding an object with a call key wins; otherwise the first JSON object in the text with one.
First, not last: a model that shows an example pick and then changes its mind is asked to
write one pick, and the menu says so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from openprogram_yaml.json_types import JSONObject, JSONValue

__all__ = ["CALL_KEYS", "call_name", "find_pick", "menu"]

#: The key naming the option, then its aliases, in the order they are read.
CALL_KEYS = ("call", "action", "function", "tool")

_FENCE = re.compile(r"```[ \t]*(?:json)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_DECODER = json.JSONDecoder()
_PY_NAMES = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "array": "list",
    "object": "dict",
    "null": "None",
}
_PLACEHOLDERS: dict[str, JSONValue] = {
    "string": "<str>",
    "integer": 0,
    "number": 0,
    "boolean": False,
    "array": [],
    "object": {},
}


def call_name(pick: JSONObject) -> tuple[str, JSONValue] | None:
    """The call key a pick uses and the option it names; ``None`` without one."""
    for key in CALL_KEYS:
        if key in pick:
            return key, pick[key]
    return None


#: How much failed decoding one search may do, in characters per character of the reply
#: (plus a floor), shared by the fenced blocks and the bare text. A reply of many unclosed
#: objects (``{"a":[1,1,...`` again and again) makes every ``{`` decode to the far end before
#: failing: quadratic, minutes of CPU for a reply under the size cap; so would many fenced
#: blocks of them, each under its own budget. An ordinary reply never comes near the budget.
_SCAN_BUDGET_PER_CHAR = 4
_SCAN_BUDGET_FLOOR = 1 << 20


def _first_pick(text: str, budget: list[int]) -> JSONObject | None:
    """The first pick in ``text``, spending ``budget[0]`` on failed decoding."""
    for match in re.finditer(r"\{", text):
        if budget[0] < 0:
            return None
        start = match.start()
        try:
            value, _ = _DECODER.raw_decode(text, start)
        except json.JSONDecodeError as exc:
            budget[0] -= exc.pos - start
        except RecursionError:  # nested past the decoder's depth: not a pick
            budget[0] -= 1000
        else:
            if isinstance(value, dict) and call_name(value) is not None:
                return value
    return None


def find_pick(text: str) -> JSONObject | None:
    """The pick in a reply: the first fenced block's, else the first bare one."""
    budget = [_SCAN_BUDGET_PER_CHAR * len(text) + _SCAN_BUDGET_FLOOR]
    for block in _FENCE.finditer(text):
        pick = _first_pick(block.group(1), budget)
        if pick is not None:
            return pick
    return _first_pick(text, budget)


# --- the menu ---------------------------------------------------------------------------


def _type_name(schema: JSONValue) -> str:
    if not isinstance(schema, dict):
        return "any"
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(_PY_NAMES.get(str(k), str(k)) for k in kind)
    if isinstance(kind, str):
        name = _PY_NAMES.get(kind, kind)
        items = schema.get("items")
        if kind == "array" and isinstance(items, dict) and items:
            return f"list[{_type_name(items)}]"
        return name
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return " | ".join(sorted({_PY_NAMES.get(_json_type(v), "any") for v in enum}))
    return "dict" if "properties" in schema else "any"


def _json_type(value: JSONValue) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object" if isinstance(value, dict) else "null"


def _placeholder(schema: JSONValue) -> JSONValue:
    if not isinstance(schema, dict):
        return None
    for known in ("const", "default"):
        if known in schema:
            return schema[known]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind is None and "properties" in schema:
        kind = "object"
    return _PLACEHOLDERS.get(kind) if isinstance(kind, str) else None


def _fields(schema: JSONObject) -> tuple[dict[str, JSONValue], list[str]]:
    props = schema.get("properties")
    required = schema.get("required")
    return (
        dict(props) if isinstance(props, dict) else {},
        [r for r in required if isinstance(r, str)] if isinstance(required, list) else [],
    )


def _option(name: str, description: str, schema: JSONObject) -> list[str]:
    props, required = _fields(schema)
    params = []
    details = []
    for param, sub in props.items():
        signature = f"{param}: {_type_name(sub)}"
        need = "required" if param in required else "optional"
        detail = f"    {param} ({_type_name(sub)}, {need})"
        if isinstance(sub, dict):
            if param not in required and "default" in sub:
                signature += f" = {json.dumps(sub['default'])}"
            text = sub.get("description")
            if isinstance(text, str) and text:
                detail += f": {text}"
            enum = sub.get("enum")
            if isinstance(enum, list) and enum:
                detail += "; one of: " + ", ".join(json.dumps(v) for v in enum)
        elif param not in required:
            signature += " = null"
        params.append(signature)
        details.append(detail)
    example = {"call": name, "args": {p: _placeholder(s) for p, s in props.items()}}
    lines = [f"- {name}({', '.join(params)})"]
    if description:
        lines.append(f"    {description}")
    lines.extend(details)
    lines.append(f"    Call: {json.dumps(example)}")
    return lines


def menu(options: Iterable[tuple[str, str, JSONObject]], *, tool_prefix: str | None) -> str:
    """The menu added to the system prompt: each option's signature, description, fields and
    a ``Call:`` example. With ``tool_prefix``, the option can also be called as a tool."""
    lines = [
        "Work on the task first (think, use tools). Then close your reply with exactly one "
        'JSON pick of the next step: {"call": "<option>", "args": {...}}.',
        "",
        "Options:",
    ]
    for name, description, schema in options:
        lines.extend(_option(name, description, schema))
    if tool_prefix is not None:
        lines += ["", f"You may instead call the tool {tool_prefix}<option> with the args, alone."]
    return "\n".join(lines)
