"""Write plain data as YAML people read and review in diffs.

The writing half of PyYAML's home (``yamlread`` is the reading half). Output is block style,
keeps the caller's key order, keeps unicode as it is, and puts multi-line strings in ``|``
literal blocks so that a changed prompt line shows as one changed line in a diff. Only the
safe dumper is used: plain data in, no Python tags out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

__all__ = ["dump_yaml"]

#: Long lines are never folded: a folded scalar moves its line breaks when one word changes,
#: which turns a one-word edit into a noisy multi-line diff.
_NO_FOLDING = 1 << 30


class ReadableDumper(yaml.SafeDumper):
    """SafeDumper with literal blocks for multi-line strings and indented lists."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        # Lists under a key are indented like mappings, as most editors write them.
        super().increase_indent(flow, False)


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # PyYAML falls back to a quoted style by itself where a literal block cannot hold
    # the text exactly (trailing spaces on a line, control characters).
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


ReadableDumper.add_representer(str, _represent_str)


def _plain(value: Any) -> Any:
    """``value`` as the types the safe dumper knows (tuples become lists, str subclasses str)."""
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    raise TypeError(f"cannot write {type(value).__name__} as YAML: plain data only")


def dump_yaml(data: Any) -> str:
    """``data`` (dicts, lists, strings, numbers, booleans, None) as readable YAML text."""
    text: str = yaml.dump(
        _plain(data),
        Dumper=ReadableDumper,
        default_flow_style=False,
        sort_keys=False,
        allow_unicode=True,
        width=_NO_FOLDING,
        indent=2,
    )
    return text
