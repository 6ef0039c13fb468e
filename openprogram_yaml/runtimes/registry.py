"""The runtime registry: which runtimes exist, where each came from, and how to get one.

One process-wide registry (``RuntimeRegistry()``; the module functions use it) maps runtime
ids to factories or shared instances. Runtimes arrive three ways, and each entry's
``metadata["origin"]`` says which:

- ``"builtin"``: this package's own runtimes, declared as entry points in its pyproject,
- ``"plugin"``: another distribution's entry point in the group ``openprogram_yaml.runtimes``
  (``metadata["distribution"]`` and ``["version"]`` name it),
- ``"code"``: ``register_runtime`` called at run time.

Nothing is discovered at import. Built-ins are known without reading any distribution's
metadata; plugins are discovered once, on the first call that needs them (a lookup of an id
that is not a built-in, a listing, a registration, or a selection that no built-in serves).
A plugin that fails to load is listed with ``metadata["error"]`` and a ``RuntimeWarning``;
it never breaks the others. All methods are thread-safe.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import threading
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

from openprogram_yaml.json_types import JSONValue

from .protocol import AgentRuntimeProtocol, RuntimeRegistryEntry

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

__all__ = [
    "ENTRY_POINT_GROUP",
    "RuntimeRegistry",
    "add_runtime_alias",
    "clear",
    "get_runtime_entry",
    "is_runtime_available",
    "list_runtimes",
    "register_runtime",
    "resolve_runtime",
    "runtime_entries",
    "unregister_runtime",
]

ENTRY_POINT_GROUP = "openprogram_yaml.runtimes"
_OWN_DISTRIBUTION = "openprogram-yaml"
#: Built-ins by entry-point value. The pyproject declares the same entry points (so that tools
#: reading entry points list them; a test keeps the two alike), but the registry knows its
#: own without scanning every installed distribution for them.
_BUILTINS = {
    "test": "openprogram_yaml.providers.test:TestRuntime",
    "openai": "openprogram_yaml.providers.openai:OpenAIRuntime",
    "anthropic": "openprogram_yaml.providers.anthropic:AnthropicRuntime",
    "replay": "openprogram_yaml.recording.replay:ReplayRuntime",
}


@dataclass(slots=True)
class _OwnEntryPoint:
    """One of this package's entry points (``_BUILTINS``), loaded as ``EntryPoint.load``
    would, without importing ``importlib.metadata`` (about 4 ms of a run's start-up)."""

    name: str
    value: str

    def load(self) -> Any:
        module, _, attribute = self.value.partition(":")
        return getattr(importlib.import_module(module), attribute)


@dataclass(eq=False, slots=True)
class _Registration:
    """One registered runtime: its public entry and what makes it."""

    entry: RuntimeRegistryEntry
    target: Any
    is_factory: bool
    #: A discovered plugin not imported yet: loaded on first use, so start-up imports only
    #: the runtime a run needs.
    entry_point: EntryPoint | _OwnEntryPoint | None = None


def _normalize(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _summary(target: Any) -> str | None:
    doc = inspect.getdoc(target if inspect.isclass(target) or callable(target) else type(target))
    return doc.strip().splitlines()[0] if doc else None


def _is_factory(target: Any) -> bool:
    """Classes and plain callables are factories; objects with ``run_turn`` are instances."""
    if inspect.isclass(target):
        return True
    if hasattr(target, "run_turn") and hasattr(target, "supports"):
        return False
    if callable(target):
        return True
    raise TypeError(
        f"a runtime must be a factory (class or callable) or an object with supports/"
        f"run_turn/stream_turn, not {type(target).__name__}"
    )


class RuntimeRegistry:
    """Runtime ids → factories or instances, with aliases and plugin discovery.

    ``RuntimeRegistry()`` returns the process-wide registry. ``RuntimeRegistry.isolated()``
    makes a separate one (for tests, or an application that wants its own).
    """

    _default: ClassVar[RuntimeRegistry | None] = None
    _default_lock: ClassVar[threading.Lock] = threading.Lock()

    _lock: threading.RLock
    _entries: dict[str, _Registration]
    _broken: dict[str, RuntimeRegistryEntry]
    _aliases: dict[str, str]
    _discovered: bool
    _builtins_known: bool
    _group: str | None

    def __new__(cls) -> RuntimeRegistry:
        registry = cls._default
        if registry is None:
            with cls._default_lock:
                if cls._default is None:
                    cls._default = cls._make(ENTRY_POINT_GROUP)
                registry = cls._default
        return registry

    @classmethod
    def isolated(cls, entry_point_group: str | None = ENTRY_POINT_GROUP) -> RuntimeRegistry:
        """A registry of its own; ``entry_point_group=None`` discovers nothing."""
        return cls._make(entry_point_group)

    @classmethod
    def _make(cls, group: str | None) -> RuntimeRegistry:
        registry = object.__new__(cls)
        registry._lock = threading.RLock()
        registry._entries = {}
        registry._broken = {}
        registry._aliases = {}
        registry._discovered = group is None
        registry._builtins_known = group is None
        registry._group = group
        return registry

    def __repr__(self) -> str:
        return f"<RuntimeRegistry group={self._group!r} runtimes={len(self._entries)}>"

    # --- registration ---------------------------------------------------------------

    def register(self, runtime_id: str, factory_or_instance: Any, **metadata: Any) -> None:
        """Register a runtime. ``display_name``, ``description`` and ``is_builtin`` fill the
        entry's fields; other keywords go to its ``metadata``. A taken id is a ValueError."""
        if not isinstance(runtime_id, str) or not runtime_id.strip():
            raise ValueError(f"a runtime id must be a non-empty string, not {runtime_id!r}")
        is_factory = _is_factory(factory_or_instance)
        self._ensure_discovered()
        display = metadata.pop("display_name", None)
        description = metadata.pop("description", None) or _summary(factory_or_instance)
        is_builtin = bool(metadata.pop("is_builtin", False))
        entry = RuntimeRegistryEntry(
            runtime_id,
            display_name=display,
            description=description,
            is_builtin=is_builtin,
            metadata={"origin": "code", "kind": "factory" if is_factory else "instance"} | metadata,
        )
        with self._lock:
            if runtime_id in self._entries or runtime_id in self._aliases:
                raise ValueError(f"runtime {runtime_id!r} is already registered")
            self._broken.pop(runtime_id, None)
            self._entries[runtime_id] = _Registration(entry, factory_or_instance, is_factory)

    def unregister(self, runtime_id: str) -> bool:
        """Remove a runtime (or an alias) and every alias pointing to it."""
        self._ensure_discovered()
        with self._lock:
            if runtime_id in self._aliases:
                del self._aliases[runtime_id]
                return True
            found = self._entries.pop(runtime_id, None) is not None
            found = self._broken.pop(runtime_id, None) is not None or found
            self._aliases = {a: c for a, c in self._aliases.items() if c != runtime_id}
            return found

    def add_alias(self, alias: str, canonical_runtime_id: str) -> None:
        """Make ``alias`` another name for a registered runtime."""
        self._ensure_discovered()
        with self._lock:
            canonical = self._aliases.get(canonical_runtime_id, canonical_runtime_id)
            if canonical not in self._entries:
                raise ValueError(self._unknown_message(canonical_runtime_id))
            if alias in self._entries or alias in self._aliases:
                raise ValueError(f"runtime {alias!r} is already registered")
            self._aliases[alias] = canonical

    def clear(self) -> None:
        """Forget everything, aliases included; the next lookup discovers plugins again."""
        with self._lock:
            self._entries.clear()
            self._broken.clear()
            self._aliases.clear()
            self._discovered = self._builtins_known = self._group is None

    # --- lookup ---------------------------------------------------------------------

    def is_registered(self, runtime_id: str) -> bool:
        """Whether ``runtime_id`` (or an alias) names a usable runtime."""
        self._ensure_known(runtime_id)
        with self._lock:
            canonical = self._aliases.get(runtime_id, runtime_id)
            registration = self._entries.get(canonical)
            return registration is not None and self._loaded(canonical, registration)

    is_available = is_registered

    def list_runtimes(self) -> list[RuntimeRegistryEntry]:
        """Every runtime, in registration order; plugins that failed to load come last,
        with ``metadata["error"]``. Each entry's ``metadata["aliases"]`` lists its aliases."""
        self._ensure_discovered()
        with self._lock:
            for runtime_id, registration in list(self._entries.items()):
                self._loaded(runtime_id, registration)
            entries = [self._public(reg.entry) for reg in self._entries.values()]
            entries += [self._public(entry) for entry in self._broken.values()]
        return entries

    def list_names(self) -> list[str]:
        """Ids of the runtimes, in registration order (a plugin is loaded, and dropped from
        this list if it fails, only when it is first used or listed in full)."""
        self._ensure_discovered()
        with self._lock:
            return list(self._entries)

    def names_by_preference(self) -> Iterator[str]:
        """Ids in registration order, as ``list_names``; plugins are discovered only when
        the caller reads past the built-ins (a selection that a built-in serves reads no
        distribution's metadata)."""
        self._ensure_builtins()
        with self._lock:
            first = list(self._entries)
        yield from first
        self._ensure_discovered()
        with self._lock:
            rest = [name for name in self._entries if name not in first]
        yield from rest

    def get_entry(self, runtime_id: str) -> RuntimeRegistryEntry | None:
        """What is known about one runtime (or the one an alias names)."""
        self._ensure_known(runtime_id)
        with self._lock:
            canonical = self._aliases.get(runtime_id, runtime_id)
            registration = self._entries.get(canonical)
            if registration is not None and self._loaded(canonical, registration):
                return self._public(registration.entry)
            broken = self._broken.get(canonical)
            return self._public(broken) if broken is not None else None

    def resolve(
        self, runtime_id: str, config_overrides: Mapping[str, object] | None = None
    ) -> AgentRuntimeProtocol:
        """A runtime instance: a fresh one from a factory (called with ``config_overrides``
        as keyword options), or the registered shared instance. Unknown ids are a
        ValueError listing the available ones."""
        self._ensure_known(runtime_id)
        with self._lock:
            canonical = self._aliases.get(runtime_id, runtime_id)
            registration = self._entries.get(canonical)
            if registration is not None and not self._loaded(canonical, registration):
                registration = None
            if registration is None:
                broken = self._broken.get(canonical)
                if broken is not None:
                    raise ValueError(
                        f"runtime {runtime_id!r} could not be loaded: {broken.metadata['error']}"
                    )
                raise ValueError(self._unknown_message(runtime_id))
        options = dict(config_overrides or {})
        if not registration.is_factory:
            if options:
                raise ValueError(
                    f"runtime {runtime_id!r} is a shared instance and takes no options "
                    f"(got: {', '.join(sorted(options))})"
                )
            runtime: Any = registration.target
        else:
            runtime = registration.target(**options)
        if not isinstance(runtime, AgentRuntimeProtocol):
            raise TypeError(
                f"runtime {runtime_id!r} gave a {type(runtime).__name__}, which lacks "
                "supports/run_turn/stream_turn"
            )
        return runtime

    # --- internals ------------------------------------------------------------------

    def _public(self, entry: RuntimeRegistryEntry) -> RuntimeRegistryEntry:
        aliases: list[JSONValue] = [
            *sorted(a for a, c in self._aliases.items() if c == entry.runtime_id)
        ]
        return replace(entry, metadata={**entry.metadata, "aliases": aliases})

    def _unknown_message(self, runtime_id: str) -> str:
        names = [*self._entries, *self._aliases]
        message = f"unknown runtime {runtime_id!r}; available: {', '.join(names) or '(none)'}"
        close = difflib.get_close_matches(runtime_id, names, n=1)
        return message + (f" (did you mean {close[0]!r}?)" if close else "")

    def _ensure_known(self, runtime_id: str) -> None:
        """Discover what answering about ``runtime_id`` needs. Before discovery the entries
        are exactly the built-ins (registering, aliasing and listing all discover first),
        and a plugin cannot take a built-in's id, so a built-in needs no discovery."""
        if self._discovered:
            return
        if self._group == ENTRY_POINT_GROUP and runtime_id in _BUILTINS:
            self._ensure_builtins()
        else:
            self._ensure_discovered()

    def _ensure_builtins(self) -> None:
        if self._builtins_known:
            return
        with self._lock:
            if self._builtins_known:
                return
            self._builtins_known = True
            if self._group == ENTRY_POINT_GROUP:
                for name, value in _BUILTINS.items():
                    self._add_entry_point(_OwnEntryPoint(name, value))

    def _ensure_discovered(self) -> None:
        if self._discovered:
            return
        self._ensure_builtins()
        with self._lock:
            if self._discovered:
                return
            # Set first: a plugin that registers from its import must not re-enter here.
            self._discovered = True
            self._discover()

    def _discover(self) -> None:
        from importlib.metadata import entry_points

        assert self._group is not None
        # Ours point into this package and are known already: telling them apart by their
        # target, not by reading every distribution's METADATA, keeps start-up fast.
        plugins = sorted(
            (ep for ep in entry_points(group=self._group) if not _is_own(ep)),
            key=lambda ep: (_dist_name(ep) or "", ep.name),
        )
        for ep in plugins:
            self._add_entry_point(ep)

    def _add_entry_point(self, ep: EntryPoint | _OwnEntryPoint) -> None:
        distribution: str | None
        version: str | None
        builtin = isinstance(ep, _OwnEntryPoint)
        if isinstance(ep, _OwnEntryPoint):
            from .._version import __version__

            distribution, version = _OWN_DISTRIBUTION, __version__
        else:
            dist = ep.dist
            distribution = dist.name if dist is not None else None
            version = dist.version if dist is not None else None
        metadata: dict[str, Any] = {
            "origin": "builtin" if builtin else "plugin",
            "distribution": distribution,
            "version": version,
            "entry_point": ep.value,
        }
        if ep.name in self._entries:
            holder = self._entries[ep.name].entry.metadata.get("distribution")
            warnings.warn(
                f"runtime {ep.name!r} from {metadata['distribution']} is ignored: "
                f"{holder or 'another registration'} already provides it",
                RuntimeWarning,
                stacklevel=4,
            )
            return
        self._entries[ep.name] = _Registration(
            RuntimeRegistryEntry(ep.name, is_builtin=builtin, metadata=metadata),
            None,
            True,
            ep,
        )

    def _loaded(self, runtime_id: str, registration: _Registration) -> bool:
        """Import a discovered plugin on first use; a failure moves it to the broken list
        with a warning. Call with the lock held. False when it cannot be used."""
        ep = registration.entry_point
        if ep is None:
            return True
        entry = registration.entry
        try:
            target = ep.load()
            is_factory = _is_factory(target)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            warnings.warn(
                f"runtime plugin {runtime_id!r} ({entry.metadata.get('distribution')}) "
                f"failed to load: {error}",
                RuntimeWarning,
                stacklevel=4,
            )
            del self._entries[runtime_id]
            self._broken[runtime_id] = replace(
                entry, metadata=entry.metadata | {"error": error, "available": False}
            )
            return False
        display = getattr(target, "display_name", None)
        registration.entry = replace(
            entry,
            display_name=display if isinstance(display, str) else entry.runtime_id,
            description=_summary(target),
            metadata=entry.metadata | {"kind": "factory" if is_factory else "instance"},
        )
        registration.target = target
        registration.is_factory = is_factory
        registration.entry_point = None
        return True


def _is_own(ep: EntryPoint) -> bool:
    return ep.value.startswith("openprogram_yaml.")


def _dist_name(ep: EntryPoint) -> str | None:
    dist = ep.dist
    return _normalize(dist.name) if dist is not None and dist.name else None


# --- the process-wide registry -----------------------------------------------------------


def register_runtime(runtime_id: str, factory_or_instance: Any, **metadata: Any) -> None:
    """Register a runtime in the process-wide registry (a taken id is a ValueError)."""
    RuntimeRegistry().register(runtime_id, factory_or_instance, **metadata)


def unregister_runtime(runtime_id: str) -> bool:
    """Remove a runtime and the aliases pointing to it; False if it was not there."""
    return RuntimeRegistry().unregister(runtime_id)


def is_runtime_available(runtime_id: str) -> bool:
    """Whether ``runtime_id`` (or an alias) names a usable runtime."""
    return RuntimeRegistry().is_available(runtime_id)


def list_runtimes() -> list[str]:
    """Ids of the usable runtimes, as the protocol's example iterates over them
    (``runtime_entries()`` gives their metadata)."""
    return RuntimeRegistry().list_names()


def runtime_entries() -> list[RuntimeRegistryEntry]:
    """Every registered runtime with its metadata (origin, distribution, version…)."""
    return RuntimeRegistry().list_runtimes()


def get_runtime_entry(runtime_id: str) -> RuntimeRegistryEntry | None:
    """The entry of one runtime, or None."""
    return RuntimeRegistry().get_entry(runtime_id)


def resolve_runtime(
    runtime_id: str, config_overrides: Mapping[str, object] | None = None
) -> AgentRuntimeProtocol:
    """An instance of a registered runtime (unknown ids: ValueError listing the others)."""
    return RuntimeRegistry().resolve(runtime_id, config_overrides)


def add_runtime_alias(alias: str, canonical_runtime_id: str) -> None:
    """Make ``alias`` another name for a registered runtime."""
    RuntimeRegistry().add_alias(alias, canonical_runtime_id)


def clear() -> None:
    """Reset the process-wide registry (for tests); built-ins come back on the next lookup."""
    RuntimeRegistry().clear()
