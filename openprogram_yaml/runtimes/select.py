"""Which runtime serves a model: rules, providers, and ``supports()``.

A model ref is ``"provider:model_id"`` (or a bare id such as ``test``); the id sent on the
wire is the part after the first ":". ``RuntimeSelector.select`` decides in this order:

1. the first ``RuntimeRule`` whose glob (``fnmatchcase``) matches the whole ref;
2. the provider the ref's prefix names: its ``ProviderConfig`` (base URL, key variable,
   headers, timeout) and its runtime, by default the runtime with the provider's name;
3. the first registered runtime whose ``supports(model_ref)`` is true;
4. otherwise a ``UsageError`` naming the model, the runtimes and the rules.

Instances are cached per (runtime id, options), so each provider configuration has one
runtime and thus one pooled HTTP client; ``aclose()`` closes them all.
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from ..json_types import JSONObject
from .protocol import AgentRuntimeProtocol
from .registry import RuntimeRegistry
from .rules import ProviderConfig, RuntimeRule, redact_options, split_model_ref

__all__ = ["RuntimeSelector", "Selection", "SelectorProblem"]


@dataclass(frozen=True, slots=True)
class Selection:
    """Why a model ref goes to a runtime. ``source`` is "rule", "provider" or "supports"."""

    model_ref: str
    model_id: str
    runtime_id: str
    source: str
    options: Mapping[str, object] = field(default_factory=dict, repr=False)
    rule_index: int | None = None
    rule: RuntimeRule | None = None
    provider: str | None = None

    def describe(self) -> str:
        """One line for messages: which rule or provider decided."""
        why = {
            "rule": f"rule {self.rule_index} (match {self.rule.match!r})" if self.rule else "",
            "provider": f"provider {self.provider!r}",
            "supports": "its supports() accepts the model",
        }[self.source]
        return f"model {self.model_ref!r} -> runtime {self.runtime_id!r} by {why}"

    def to_dict(self) -> JSONObject:
        """A JSON-ready view with secrets redacted (for ``--json`` and traces)."""
        return {
            "model_ref": self.model_ref,
            "model_id": self.model_id,
            "runtime": self.runtime_id,
            "source": self.source,
            "rule_index": self.rule_index,
            "rule": self.rule.match if self.rule else None,
            "provider": self.provider,
            "options": redact_options(self.options),
        }


@dataclass(slots=True)
class SelectorProblem:
    """A rule or provider that names no registered runtime; ``where`` is
    ``"runtimes[i]"`` or ``"providers.NAME"``."""

    where: str
    message: str


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return frozenset(_freeze(v) for v in value)
    try:
        hash(value)
    except TypeError:
        return ("<id>", id(value))
    return value


class RuntimeSelector:
    """Picks, creates and caches the runtime serving each model ref.

    >>> selector = RuntimeSelector(
    ...     rules=[RuntimeRule("local:*", "openai", {"base_url": "http://127.0.0.1:11434/v1"})],
    ...     providers={"anthropic": ProviderConfig("anthropic", api_key_env="MY_KEY")},
    ... )
    >>> selector.explain("local:llama3").runtime_id
    'openai'
    """

    def __init__(
        self,
        rules: Iterable[RuntimeRule] = (),
        providers: Mapping[str, ProviderConfig] | Iterable[ProviderConfig] = (),
        registry: RuntimeRegistry | None = None,
    ) -> None:
        self.rules: tuple[RuntimeRule, ...] = tuple(rules)
        if isinstance(providers, Mapping):
            self.providers: dict[str, ProviderConfig] = dict(providers)
        else:
            self.providers = {p.name: p for p in providers}
        self.registry = registry if registry is not None else RuntimeRegistry()
        self._lock = threading.RLock()
        self._selections: dict[str, Selection] = {}
        self._instances: dict[tuple[str, Any], AgentRuntimeProtocol] = {}
        #: The runtime each model ref was served by: a ref's selection never changes, so
        #: its options are frozen (for ``_instances``' key) once, not on every call.
        self._by_ref: dict[str, AgentRuntimeProtocol] = {}
        self._owned: list[AgentRuntimeProtocol] = []

    def __repr__(self) -> str:
        return f"RuntimeSelector(rules={list(self.rules)!r}, providers={list(self.providers)!r})"

    # --- deciding -------------------------------------------------------------------

    def explain(self, model_ref: str) -> Selection:
        """Which runtime serves ``model_ref``, with what options, decided by what."""
        cached = self._selections.get(model_ref)
        if cached is not None:
            return cached
        selection = self._decide(model_ref)
        with self._lock:
            self._selections[model_ref] = selection
        return selection

    def _decide(self, model_ref: str) -> Selection:
        prefix, model_id = split_model_ref(model_ref)
        provider = self.providers.get(prefix) if prefix is not None else None
        for index, rule in enumerate(self.rules):
            if rule.matches(model_ref):
                options: dict[str, Any] = {}
                if provider is not None and provider.runtime_id == rule.runtime:
                    options.update(provider.runtime_options())
                options.update(rule.options)
                return Selection(
                    model_ref, model_id, rule.runtime, "rule", options, index, rule, prefix
                )
        if provider is not None:
            return Selection(
                model_ref,
                model_id,
                provider.runtime_id,
                "provider",
                provider.runtime_options(),
                provider=prefix,
            )
        if prefix is not None and self.registry.is_available(prefix):
            return Selection(model_ref, model_id, prefix, "provider", {}, provider=prefix)
        for runtime_id in self.registry.names_by_preference():
            try:
                runtime = self._instance(runtime_id, {})
                if runtime.supports(model_ref):
                    return Selection(model_ref, model_id, runtime_id, "supports", {})
            except Exception:  # a runtime that cannot say is not a candidate
                continue
        raise UsageError(self._no_runtime_message(model_ref, prefix))

    def _no_runtime_message(self, model_ref: str, prefix: str | None) -> str:
        names = self.registry.list_names()
        lines = [f"no runtime serves model {model_ref!r}"]
        if prefix is not None:
            candidates = sorted({*self.providers, *names})
            close = difflib.get_close_matches(prefix, candidates, n=1, cutoff=0.6)
            if close:
                _, model_id = split_model_ref(model_ref)
                lines.append(f"  did you mean {close[0] + ':' + model_id!r}?")
        lines.append(f"  registered runtimes: {', '.join(names) or '(none)'}")
        if self.rules:
            shown = ", ".join(f"{r.match!r} -> {r.runtime}" for r in self.rules)
            lines.append(f"  rules: {shown}")
        else:
            lines.append("  rules: (none)")
        if self.providers:
            lines.append(f"  providers: {', '.join(self.providers)}")
        return "\n".join(lines)

    def check(self) -> list[SelectorProblem]:
        """Rules and providers naming runtimes that are not registered (for config checks)."""
        problems: list[SelectorProblem] = []
        names = self.registry.list_names()

        def missing(runtime_id: str) -> str | None:
            if self.registry.is_available(runtime_id):
                return None
            close = difflib.get_close_matches(runtime_id, names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            return (
                f"runtime {runtime_id!r} is not registered{hint}; "
                f"available: {', '.join(names) or '(none)'}"
            )

        for index, rule in enumerate(self.rules):
            message = missing(rule.runtime)
            if message:
                problems.append(SelectorProblem(f"runtimes[{index}]", message))
        for name, provider in self.providers.items():
            message = missing(provider.runtime_id)
            if message:
                problems.append(SelectorProblem(f"providers.{name}", message))
        return problems

    # --- instances ------------------------------------------------------------------

    def select(self, model_ref: str) -> AgentRuntimeProtocol:
        """The runtime instance serving ``model_ref`` (created once per configuration)."""
        runtime = self._by_ref.get(model_ref)
        if runtime is not None:
            return runtime
        selection = self.explain(model_ref)
        runtime = self._instance(selection.runtime_id, selection.options, selection)
        with self._lock:
            self._by_ref[model_ref] = runtime
        return runtime

    def _instance(
        self,
        runtime_id: str,
        options: Mapping[str, object],
        selection: Selection | None = None,
    ) -> AgentRuntimeProtocol:
        key = (runtime_id, _freeze(options))
        runtime = self._instances.get(key)
        if runtime is not None:
            return runtime
        with self._lock:
            runtime = self._instances.get(key)
            if runtime is not None:
                return runtime
            try:
                runtime = self.registry.resolve(runtime_id, options or None)
            except (TypeError, ValueError) as exc:
                where = f" ({selection.describe()})" if selection is not None else ""
                raise UsageError(f"cannot create runtime {runtime_id!r}{where}: {exc}") from exc
            self._instances[key] = runtime
            entry = self.registry.get_entry(runtime_id)
            if entry is not None and entry.metadata.get("kind") != "instance":
                self._owned.append(runtime)
        return runtime

    async def aclose(self) -> None:
        """Close every runtime this selector created (shared instances are left open)."""
        with self._lock:
            owned, self._owned = self._owned, []
            self._instances.clear()
            self._by_ref.clear()
        errors: list[Exception] = []
        for runtime in owned:
            close = getattr(runtime, "aclose", None)
            if close is None:
                continue
            try:
                await close()
            except Exception as exc:  # close the rest before reporting
                errors.append(exc)
        if errors:
            raise errors[0]
