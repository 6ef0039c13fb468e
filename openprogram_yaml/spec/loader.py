"""Read an agent file into an ``AgentSpec``, reporting every problem in one go."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ..errors import ConfigError, Diagnostic
from ..redaction import redact
from .diagnostics import validation_diagnostics, without_unknown_keys
from .env import expand_env
from .models import AgentSpec
from .yamlread import SourceMap, load_yaml_file

__all__ = ["AgentDocument", "PartialDocument", "load_agent_file", "load_document"]

M = TypeVar("M", bound=BaseModel)


@dataclass(slots=True)
class AgentDocument:
    """An agent file, validated: the spec plus where everything in it came from."""

    path: Path
    spec: AgentSpec
    source: SourceMap
    #: Secret values read from the environment; output and traces redact them.
    secrets: set[str] = field(default_factory=set)
    env_names: set[str] = field(default_factory=set)


class PartialDocument(ConfigError):
    """A file that failed validation, with what could be read of it.

    The compiler uses ``data`` to keep checking the parts that are valid (a method's template,
    say), so one run reports every problem of the file.
    """

    def __init__(
        self,
        diagnostics: list[Diagnostic],
        data: Any,
        source: SourceMap,
        secrets: frozenset[str] = frozenset(),
        spec: BaseModel | None = None,
        env_places: frozenset[tuple[int, int]] = frozenset(),
    ) -> None:
        super().__init__(diagnostics)
        self.data = data
        self.source = source
        #: The secrets ``data`` holds; messages about it must not show them.
        self.secrets = secrets
        #: The spec, when only ``${env:…}`` expansion failed or only keys were unknown (read
        #: without them: ``without_unknown_keys``): the rest can still be compiled.
        self.spec = spec
        #: (line, column) of the values an unset variable left empty, or the YAML reader
        #: dropped as invalid: problems found there later are follow-ons of the one already
        #: reported, not problems of their own.
        self.env_places = env_places


def load_document(
    path: Path,
    model: type[M],
    *,
    display: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[M, SourceMap, set[str], set[str]]:
    """Load one YAML file into ``model``: (spec, source map, secrets, env names).

    Raises ``ConfigError`` carrying every problem found in the file.
    """
    # A duplicate key or a key with no value leaves the rest readable: go on, so the file's
    # other problems are reported in the same run.
    loaded = load_yaml_file(path, display=display, partial=True)
    source = loaded.source
    if not isinstance(loaded.data, dict):
        kind = "a list" if isinstance(loaded.data, list) else f"{type(loaded.data).__name__}"
        raise ConfigError(
            [
                *loaded.problems,
                Diagnostic(
                    source.path, 1, 1, f"expected a mapping of keys (version: 1, ...), not {kind}"
                ),
            ]
        )
    expanded = expand_env(loaded.data, source, environ)
    diagnostics: list[Diagnostic] = [*loaded.problems, *expanded.diagnostics]
    env_places = frozenset((d.line, d.col) for d in diagnostics)
    spec: M | None = None
    try:
        spec = model.model_validate(expanded.data)
    except ValidationError as exc:
        found = validation_diagnostics(exc, expanded.data, source, model)
        diagnostics.extend(d for d in found if (d.line, d.col) not in env_places)
        recovered = without_unknown_keys(exc, expanded.data, source, model)
        if recovered is not None:
            spec, source = recovered
    if diagnostics or spec is None:
        # Messages quote the values they refuse, and a value may be a secret.
        secrets = frozenset(expanded.secrets)
        shown = [
            dataclasses.replace(d, message=redact(d.message, secrets)) if secrets else d
            for d in diagnostics
        ]
        raise PartialDocument(shown, expanded.data, source, secrets, spec, env_places)
    return spec, source, expanded.secrets, expanded.names


def load_agent_file(
    path: Path, *, display: str | None = None, environ: Mapping[str, str] | None = None
) -> AgentDocument:
    """Read and validate an agent file; nothing is compiled or run."""
    spec, source, secrets, names = load_document(path, AgentSpec, display=display, environ=environ)
    return AgentDocument(path, spec, source, secrets, names)
