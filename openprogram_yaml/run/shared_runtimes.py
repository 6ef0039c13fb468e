"""Runtimes that live as long as the program version they serve.

A run alone (the command line) opens its agent's runtime selector and closes it at its end.
A server runs many: opening a provider runtime per run costs a new pooled HTTP client, and
so a new connection and its setup, every time. Here the runs of one ``Program`` version
share one ``RuntimeSelector`` per distinct runtime configuration (an agent's ``runtimes:``
rules and providers; agents of one project usually share theirs), and with it the provider
runtimes and their connection pools. Provider runtimes keep no per-turn state (the Python
API serves many execs from one), and what belongs to one run (trace, tool gate, asker,
usage, observer) stays in that run's own ``Runtime``, which is cheap to build.

``RunService`` keeps a ``SharedRuntimes``. A reload swaps the version the next run gets;
the old version's runtimes close when its last run in flight ends, never while one uses
them. Tools holding clients (the http tool) follow the same lifetime, with one twist: a
reload keeps the compiled agents whose files did not change, so the new version may hold
the very same tool objects; those stay open and are closed with the version that holds them
last.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..redaction import env_secrets
from ..runtime.toolsets import Tool, as_tool
from ..runtimes.protocol import AgentRuntimeProtocol, RuntimeSelectorProtocol
from ..runtimes.select import RuntimeSelector, Selection
from .agent_runtime import close_tools, selector_for
from .record import run_secrets

if TYPE_CHECKING:
    from ..compile.program import Agent, Program
    from ..runtimes.rules import ProviderConfig, RuntimeRule

__all__ = ["LentSelector", "SharedRuntimes", "VersionRuntimes"]


class LentSelector:
    """A shared selector as one run sees it: it selects as the shared one does, and its
    ``aclose`` leaves the shared one open (the run's ``Runtime``, and any recording or
    replay wrapper put in front, close what they were given when the run ends)."""

    __slots__ = ("shared",)

    def __init__(self, shared: RuntimeSelector) -> None:
        self.shared = shared

    def __repr__(self) -> str:
        return f"LentSelector({self.shared!r})"

    def select(self, model_ref: str) -> AgentRuntimeProtocol:
        return self.shared.select(model_ref)

    def explain(self, model_ref: str) -> Selection:
        """As ``RuntimeSelector.explain`` (recordings read the options to redact keys)."""
        return self.shared.explain(model_ref)

    async def aclose(self) -> None:
        """Nothing: the selector is the version's, closed when the version is done."""


class VersionRuntimes:
    """What the runs of one ``Program`` version share: one selector per distinct runtime
    configuration, opened on first use, and the agents whose tools it must close.

    ``runs`` counts the runs using it; ``SharedRuntimes`` closes it once it is no longer
    the newest version and ``runs`` is back to 0.
    """

    def __init__(self, program: Program) -> None:
        self.program = program
        self.runs = 0
        self.closed = False
        self._selectors: list[
            tuple[tuple[RuntimeRule, ...], Mapping[str, ProviderConfig], RuntimeSelector]
        ] = []
        self._by_agent: dict[str, LentSelector] = {}
        #: Agents run on this version (or handed over by an older one holding the same
        #: objects): their tools are closed with it.
        self.agents: dict[int, Agent] = {}
        #: Each agent's ``run_secrets``, with the agent and the environment's secrets it
        #: was made from.
        self._secrets: dict[str, tuple[Agent, frozenset[str], frozenset[str]]] = {}
        #: Each agent's tools as the ``Tool``s a ``Runtime`` takes, with the agent.
        self._tools: dict[str, tuple[Agent, tuple[Tool, ...]]] = {}

    def __repr__(self) -> str:
        return f"VersionRuntimes(version={self.program.version!r}, runs={self.runs})"

    def selector(self, agent: Agent) -> RuntimeSelectorProtocol:
        """The selector ``agent``'s runs use on this version; closing it closes nothing."""
        if self.closed:
            raise RuntimeError("the runtimes of this version are closed")
        lent = self._by_agent.get(agent.name)
        if lent is not None:
            return lent
        self.agents[id(agent)] = agent
        rules, providers = agent.runtime_rules, agent.providers
        # Rules and provider configs are frozen dataclasses: equal when configured alike.
        selector = next(
            (s for r, p, s in self._selectors if r == rules and p == providers),
            None,
        )
        if selector is None:
            selector = selector_for(agent)
            self._selectors.append((rules, providers, selector))
        lent = self._by_agent[agent.name] = LentSelector(selector)
        return lent

    def secrets(self, agent: Agent) -> frozenset[str]:
        """``run_secrets(agent)``, worked out again only when the environment changed.

        An agent's own secrets (its ``${env:…}`` values, runtime keys and headers) are the
        version's; what the environment adds is read when each run starts, as
        ``run_secrets`` reads it: ``env_secrets()`` hands back the same set for as long
        as the environment is unchanged, and a new one (so a new result here) once it is
        not.
        """
        environ = env_secrets()
        cached = self._secrets.get(agent.name)
        if cached is not None and cached[0] is agent and cached[1] is environ:
            return cached[2]
        found = run_secrets(agent)
        self._secrets[agent.name] = (agent, environ, found)
        return found

    def tools(self, agent: Agent) -> tuple[Tool, ...]:
        """``agent.tools`` as ``Tool``s (``as_tool``), made once for the runs of this
        version: each run's ``Runtime`` takes them as they are instead of making each
        again (a compiled tool does not change once compiled)."""
        cached = self._tools.get(agent.name)
        if cached is not None and cached[0] is agent:
            return cached[1]
        made = tuple(as_tool(tool) for tool in agent.tools)
        self._tools[agent.name] = (agent, made)
        return made

    def holds(self, agent: Agent) -> bool:
        """Whether this version's program holds this very agent object."""
        return self.program.agents.get(agent.name) is agent

    async def aclose(self, keep: Mapping[int, Agent] | None = None) -> None:
        """Close every selector (and so every provider runtime and its HTTP client) and
        the tools of the agents run here; ``keep`` names agents (by id) whose tools another
        version still holds. Errors are reported on stderr once everything was tried."""
        if self.closed:
            return
        self.closed = True
        selectors = [selector for _, _, selector in self._selectors]
        self._selectors.clear()
        self._by_agent.clear()
        agents = [a for key, a in self.agents.items() if keep is None or key not in keep]
        self.agents.clear()
        for selector in selectors:
            try:
                await selector.aclose()
            except Exception as exc:  # close the rest; a failed close is only reported
                _report(self, exc)
        for agent in agents:
            try:
                await close_tools(agent)
            except Exception as exc:
                _report(self, exc)


def _report(version: VersionRuntimes, exc: Exception) -> None:
    print(
        f"warning: closing the runtimes of version {version.program.version}: "
        f"{type(exc).__name__}: {exc}",
        file=sys.stderr,
    )


class SharedRuntimes:
    """The ``VersionRuntimes`` of the newest version and of older ones still in use.

    ``acquire`` (when a run starts, with the version it takes) and ``release`` (when it
    ends) count the runs of each version; an older version is closed by the release of its
    last run, or by the end of the first run on a newer one if it had none left. One event
    loop uses it (a ``RunService``'s), so no lock is needed.
    """

    def __init__(self) -> None:
        #: Oldest first; the last one is the version new runs get.
        self.versions: list[VersionRuntimes] = []

    def acquire(self, program: Program) -> VersionRuntimes:
        """The runtimes of ``program``'s version, counted as used by one more run."""
        newest = self.versions[-1] if self.versions else None
        if newest is None or newest.program is not program:
            newest = VersionRuntimes(program)
            self.versions.append(newest)
        newest.runs += 1
        return newest

    async def release(self, version: VersionRuntimes) -> None:
        """One run of ``version`` ended: close the older versions no run uses any more."""
        version.runs -= 1
        idle = [v for v in self.versions[:-1] if v.runs == 0]
        for old in idle:
            self.versions.remove(old)
        for old in idle:
            await old.aclose(keep=self._hand_over(old))

    def _hand_over(self, old: VersionRuntimes) -> dict[int, Agent]:
        """The agents of ``old`` that a version still open holds too (a reload kept them):
        their tools pass to the newest such version instead of closing."""
        kept: dict[int, Agent] = {}
        for key, agent in old.agents.items():
            for version in reversed(self.versions):
                if version.holds(agent):
                    version.agents.setdefault(key, agent)
                    kept[key] = agent
                    break
        return kept

    async def aclose(self) -> None:
        """Close every version's runtimes and tools (the service is shutting down)."""
        versions, self.versions = self.versions, []
        for version in versions:
            await version.aclose()
