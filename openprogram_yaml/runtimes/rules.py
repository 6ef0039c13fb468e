"""What runtime selection decides from: ``RuntimeRule``s and ``ProviderConfig``s, plain data
read from the config (``runtimes:`` and ``providers:``), and the model ref they apply to.

Apart from ``select`` so that compiling a Program, which builds these, does not load the
registry; their ``repr`` hides keys and header values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from openprogram_yaml.redaction import REDACTED

__all__ = ["ProviderConfig", "RuntimeRule", "redact_options", "split_model_ref"]


def split_model_ref(model_ref: str) -> tuple[str | None, str]:
    """``"openai:gpt-4o"`` → ``("openai", "gpt-4o")``; a bare ``"test"`` → ``(None, "test")``."""
    prefix, sep, rest = model_ref.partition(":")
    return (prefix, rest) if sep else (None, model_ref)


def redact_options(options: Mapping[str, object]) -> dict[str, Any]:
    """Options fit to print: the key and header values replaced by ``***``."""
    out: dict[str, Any] = {}
    for name, value in options.items():
        if name == "api_key" and value:
            out[name] = REDACTED
        elif name == "headers" and isinstance(value, Mapping):
            out[name] = dict.fromkeys(value, REDACTED)
        else:
            out[name] = value
    return out


@dataclass(frozen=True, repr=False, slots=True)
class RuntimeRule:
    """Models matching ``match`` (a glob on the whole model ref) go to ``runtime``,
    created with ``options``."""

    match: str
    runtime: str
    options: Mapping[str, object] = field(default_factory=dict)

    def matches(self, model_ref: str) -> bool:
        return fnmatchcase(model_ref, self.match)

    def __repr__(self) -> str:
        return (
            f"RuntimeRule(match={self.match!r}, runtime={self.runtime!r}, "
            f"options={redact_options(self.options)!r})"
        )


@dataclass(frozen=True, repr=False, slots=True)
class ProviderConfig:
    """A named provider: the runtime behind it (default: the runtime named ``name``) and
    how to reach it. ``options`` holds further runtime options. The key and header values
    never appear in ``repr`` or ``explain()``."""

    name: str
    runtime: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    api_key: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float | None = None
    options: Mapping[str, object] = field(default_factory=dict)

    @property
    def runtime_id(self) -> str:
        return self.runtime or self.name

    def runtime_options(self) -> dict[str, Any]:
        """The keyword options the runtime is created with."""
        options: dict[str, Any] = {}
        if self.name != self.runtime_id:
            options["provider"] = self.name
        if self.base_url is not None:
            options["base_url"] = self.base_url
        if self.api_key_env is not None:
            options["api_key_env"] = self.api_key_env
        if self.api_key is not None:
            options["api_key"] = self.api_key
        if self.headers:
            options["headers"] = dict(self.headers)
        if self.timeout_s is not None:
            options["timeout_s"] = self.timeout_s
        options.update(self.options)
        return options

    def __repr__(self) -> str:
        shown = redact_options(self.runtime_options())
        return f"ProviderConfig(name={self.name!r}, runtime={self.runtime_id!r}, {shown!r})"
