"""The types of JSON data: ``JSONValue`` (what ``json.loads`` returns) and ``JSONObject``.

One place for them, so that a value that is JSON says so instead of ``Any``.
"""

from __future__ import annotations

from typing import TypeAlias

__all__ = ["JSONObject", "JSONValue"]

JSONValue: TypeAlias = "dict[str, JSONValue] | list[JSONValue] | str | int | float | bool | None"
JSONObject: TypeAlias = "dict[str, JSONValue]"
