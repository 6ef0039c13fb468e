"""The seed's deep import path for the runtime registry (``praisonaiagents.runtime.registry``).

The registry lives in ``openprogram_yaml.runtimes.registry``; this module only gives its
functions the path the protocol's examples import them from
(``from openprogram_yaml.runtime.registry import add_runtime_alias``), so that code written
against the seed runs unchanged.
"""

from __future__ import annotations

from openprogram_yaml.runtimes.registry import (
    RuntimeRegistry,
    add_runtime_alias,
    get_runtime_entry,
    is_runtime_available,
    list_runtimes,
    register_runtime,
    resolve_runtime,
    runtime_entries,
    unregister_runtime,
)

__all__ = [
    "RuntimeRegistry",
    "add_runtime_alias",
    "get_runtime_entry",
    "is_runtime_available",
    "list_runtimes",
    "register_runtime",
    "resolve_runtime",
    "runtime_entries",
    "unregister_runtime",
]
