"""What a ``Runtime`` tells about the usage of each model call, and asks before one.

``Runtime.meter`` is None unless a front end sets one (``run.costs.CostMeter`` turns usage
into cost and keeps a run's budget). The exec loop calls ``before_call`` before every
request (it may raise to stop the run) and ``add`` with every reply's usage, so the cost
so far is known between two calls, not only when an exec ends.
"""

from __future__ import annotations

from typing import Protocol

from openprogram_yaml.runtimes.protocol import AgentRuntimeProtocol, Usage

__all__ = ["UsageMeter"]


class UsageMeter(Protocol):
    """Counts model usage per model as it happens; may refuse the next call."""

    def before_call(self, model_ref: str, runtime: AgentRuntimeProtocol) -> None:
        """Called before each request to ``model_ref``; raise to stop the exec."""
        ...

    def add(self, model_ref: str, runtime: AgentRuntimeProtocol, usage: Usage) -> None:
        """The usage one reply of ``model_ref`` (served by ``runtime``) reported."""
        ...
