"""``${env:NAME}`` and ``${env:NAME:-default}`` in string values.

``$${`` writes a literal ``${``. A bare ``${NAME}`` is refused rather than left as literal text,
since that is nearly always a forgotten ``env:``. Values of secret-looking variables
(``*_KEY``, ``*_TOKEN``, …) or filling secret fields (headers, ``api_key``) are remembered
so output and traces can redact them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from ..errors import Diagnostic
from ..json_types import is_text
from .yamlread import Loc, SourceMap

__all__ = ["EnvExpansion", "expand_env"]

_TOKEN = re.compile(
    r"\$\$\{"  # escaped
    r"|\$\{env:(?P<name>[^}:]*)(?::-(?P<default>[^}]*))?\}"
    r"|\$\{(?P<bare>[A-Za-z_][A-Za-z0-9_]*)(?::-[^}]*)?\}"
)
_VALID_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: A variable is a secret when its name or the field it fills says so.
_SECRET_NAME = re.compile(
    r"KEY|TOKEN|SECRET|PASSW|AUTH|CREDENTIAL|COOKIE|SESSION|PRIVATE|SIGNATURE", re.I
)
_SECRET_FIELDS = frozenset({"headers", "api_key", "token", "password", "auth"})

#: Values shorter than this are too short to redact usefully (they'd mangle ordinary text).
_MIN_SECRET_LEN = 4


@dataclass(slots=True)
class EnvExpansion:
    """The result of expanding a document: the new data, problems, and secret values read."""

    data: Any
    diagnostics: list[Diagnostic] = field(default_factory=list)
    secrets: set[str] = field(default_factory=set)
    #: Names of the variables read, for provenance and reload decisions.
    names: set[str] = field(default_factory=set)


def expand_env(
    data: Any, source: SourceMap, environ: Mapping[str, str] | None = None
) -> EnvExpansion:
    """Expand env references in every string of ``data`` (keys are left alone)."""
    env = os.environ if environ is None else environ
    text = source.text
    if text and "${" not in text and "\\" not in text:
        # Nothing to expand, nor to refuse: every string is the file's text or an unescaped
        # piece of it (folding joins lines with a space), and only a double-quoted escape
        # could spell "${" where the text does not. Most files of a repository skip the walk.
        return EnvExpansion(data)
    result = EnvExpansion(None)
    result.data = _walk(data, (), source, env, result)
    return result


def _walk(
    value: Any, loc: Loc, source: SourceMap, env: Mapping[str, str], out: EnvExpansion
) -> Any:
    if isinstance(value, str):
        return _expand(value, loc, source, env, out) if "${" in value else value
    if isinstance(value, dict):
        return {k: _walk(v, (*loc, k), source, env, out) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, (*loc, i), source, env, out) for i, v in enumerate(value)]
    return value


def _is_secret(name: str, loc: Loc) -> bool:
    return (
        bool(_SECRET_NAME.search(name))
        or any(isinstance(p, str) and p.lower() in _SECRET_FIELDS for p in loc)
        or _in_server_env(loc)
    )


def _in_server_env(loc: Loc) -> bool:
    """Whether ``loc`` lies in an MCP server's ``env``: what a server is handed in its
    environment is its credentials, whatever the variable is called."""
    return any(pair == ("mcp", "env") for pair in pairwise(loc))


def _field_name(loc: Loc) -> str:
    return ".".join(str(p) for p in loc) or "the document"


def _expand(
    text: str, loc: Loc, source: SourceMap, env: Mapping[str, str], out: EnvExpansion
) -> str:
    def replace(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "$${":
            return "${"
        pos = source.at(loc)
        if match.group("bare") is not None:
            bare = match.group("bare")
            out.diagnostics.append(
                Diagnostic(
                    pos.path,
                    pos.line,
                    pos.col,
                    f"'${{{bare}}}' in '{_field_name(loc)}' is not expanded; write "
                    f"'${{env:{bare}}}' to read the environment, or '$${{{bare}}}' for the "
                    "literal text",
                )
            )
            return token
        name = match.group("name")
        if not _VALID_NAME.fullmatch(name):
            out.diagnostics.append(
                Diagnostic(
                    pos.path,
                    pos.line,
                    pos.col,
                    f"'{token}' in '{_field_name(loc)}' does not name a valid environment "
                    "variable; write '${env:NAME}' or '${env:NAME:-default}'",
                )
            )
            return token
        out.names.add(name)
        found = env.get(name)
        if found is not None and not is_text(found):
            out.diagnostics.append(
                Diagnostic(
                    pos.path,
                    pos.line,
                    pos.col,
                    f"environment variable {name} (needed by '{_field_name(loc)}') holds "
                    "bytes that are not UTF-8; set it to UTF-8 text",
                )
            )
            return ""
        if found is not None:
            if len(found) >= _MIN_SECRET_LEN and _is_secret(name, loc):
                out.secrets.add(found)
            return found
        default = match.group("default")
        if default is not None:
            return default
        out.diagnostics.append(
            Diagnostic(
                pos.path,
                pos.line,
                pos.col,
                f"environment variable {name} is not set (needed by '{_field_name(loc)}'); "
                f"set it, or give a default: '${{env:{name}:-value}}'",
            )
        )
        return ""

    return _TOKEN.sub(replace, text)
