"""Keeping secrets out of what is printed, recorded or traced: one rule for every layer.

Which values are secret: those the loader took for secrets when it expanded ``${env:…}``,
the key and header values a runtime is given (``api_key``, ``headers``, and the value of
the variable ``api_key_env`` names), and the values of environment variables whose names
look secret (``OPENAI_API_KEY``, ``SHOP_TOKEN`` …), which is where built-in and plugin
runtimes read their keys when no option names one.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar, cast

__all__ = [
    "REDACTED",
    "StreamRedactor",
    "env_secrets",
    "redact",
    "redact_json",
    "secrets_in_options",
]

REDACTED = "***"

_Data = TypeVar("_Data")

#: Shorter values are not treated as secrets: replacing them would mangle ordinary text.
MIN_SECRET_LEN = 4

_SECRET_NAME_PARTS = frozenset(
    {"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS"}
)
#: A variable picked by its name alone must hold a longer value: short ones are too likely
#: to occur in ordinary text to be replaced everywhere.
_MIN_ENV_SECRET = 8


def redact_json(value: _Data, secrets: Iterable[str | None]) -> _Data:
    """``value`` (JSON data) with every string in it redacted, keys kept."""
    secrets = tuple(secrets)
    if isinstance(value, str):
        return cast(_Data, redact(value, secrets))
    if isinstance(value, dict):
        return cast(_Data, {key: redact_json(item, secrets) for key, item in value.items()})
    if isinstance(value, list):
        return cast(_Data, [redact_json(item, secrets) for item in value])
    return value


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every secret replaced by ``***`` (longest first, so a secret that
    contains another is hidden whole). A secret is found as it is and as it reads inside a
    JSON string, where quotes, backslashes and other characters are escaped."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        if len(secret) < MIN_SECRET_LEN:
            continue
        for form in _written_forms(secret):
            if form in text:
                text = text.replace(form, REDACTED)
    return text


def _written_forms(secret: str) -> tuple[str, ...]:
    if secret.isascii() and secret.isprintable() and '"' not in secret and "\\" not in secret:
        return (secret,)
    escaped = json.dumps(secret, ensure_ascii=False)[1:-1]
    ascii_escaped = json.dumps(secret)[1:-1]
    return tuple(dict.fromkeys((secret, escaped, ascii_escaped)))


class StreamRedactor:
    """Redacts text sent piece by piece (a model's streamed answer): a secret split across
    pieces is still hidden.

    The end of what was fed that could begin a secret is held back until the next piece
    shows whether it does; ``flush`` gives what is held at the end.
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = sorted({s for s in secrets if len(s) >= MIN_SECRET_LEN}, key=len)
        self._held = ""

    def feed(self, text: str) -> str:
        """What of ``text`` (after what is held) can be shown now, redacted."""
        if not self.secrets:
            return text
        held = self._held + text
        cut = self._safe_end(held)
        self._held = held[cut:]
        return redact(held[:cut], self.secrets)

    def flush(self) -> str:
        """What is held back, redacted: the end of the stream."""
        held, self._held = self._held, ""
        return redact(held, self.secrets)

    def _safe_end(self, text: str) -> int:
        """Where ``text`` can be cut without cutting a secret, whole or begun."""
        cut = len(text)
        for secret in self.secrets:  # a secret the text ends with the start of
            for start in range(max(0, len(text) - len(secret) + 1), len(text)):
                if secret.startswith(text[start:]):
                    cut = min(cut, start)
                    break
        moved = True
        while moved:  # never cut through a whole secret either
            moved = False
            for secret in self.secrets:
                start = text.find(secret, max(0, cut - len(secret) + 1))
                if start != -1 and start < cut < start + len(secret):
                    cut, moved = start, True
        return cut


def env_secrets(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """Values of environment variables whose names look secret (``*_API_KEY``, ``*_TOKEN``…).

    Of ``os.environ`` (no ``environ``), the last walk is handed back while the environment
    is unchanged (``_EnvironSecrets``): every run, recorded turn and served reply asks."""
    if environ is None:
        return _ENVIRON_SECRETS.get()
    return _walk(environ)


def _walk(environ: Mapping[str, str]) -> frozenset[str]:
    found: set[str] = set()
    for name in environ:  # values read only for secret-looking names: each read decodes
        if _looks_secret(name):
            value = environ[name]
            if len(value) >= _MIN_ENV_SECRET:
                found.add(value)
    return frozenset(found)


class _EnvironSecrets:
    """``env_secrets()`` of this process's environment, walked again only once it changed.

    The process may change its environment at any time, so every caller reads it anew. The
    walk decodes every variable's name (6 us at 38 variables, about twice that inside a
    run); comparing ``os.environ``'s own mapping of bytes with the copy taken at the last
    walk costs under a microsecond, so the walk is done again only when a variable was set,
    changed or removed since.
    """

    def __init__(self) -> None:
        self._last: tuple[dict[bytes, bytes], frozenset[str]] | None = None

    def get(self) -> frozenset[str]:
        data = getattr(os.environ, "_data", None)
        if not isinstance(data, dict):  # not CPython's os.environ: walk it every time
            return _walk(os.environ)
        last = self._last
        if last is not None and last[0] == data:
            return last[1]
        seen = dict(data)  # copied before the walk: a change during it is seen next time
        found = _walk(os.environ)
        self._last = (seen, found)
        return found


#: The one owner of the environment's secrets as last walked.
_ENVIRON_SECRETS = _EnvironSecrets()


@functools.lru_cache(maxsize=4096)
def _looks_secret(name: str) -> bool:
    # Every run reads the whole environment; a name's verdict never changes, so it is
    # worked out once (the split was most of the walk's 53 us here, with 38 variables).
    return not _SECRET_NAME_PARTS.isdisjoint(re.split(r"[^A-Z0-9]+", name.upper()))


def secrets_in_options(
    options: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> set[str]:
    """Secret values in runtime options or turn kwargs: keys, header values, key variables."""
    environ = os.environ if environ is None else environ
    found: set[str] = set()
    key = options.get("api_key")
    if isinstance(key, str):
        found.add(key)
    headers = options.get("headers")
    if isinstance(headers, Mapping):
        found.update(v for v in headers.values() if isinstance(v, str))
    key_env = options.get("api_key_env")
    if isinstance(key_env, str) and environ.get(key_env):
        found.add(environ[key_env])
    return found
