"""How a failed run's error reads on the terminal (a plain run and ``--watch``)."""

from __future__ import annotations

from collections.abc import Mapping

from ..shown_text import shown_on_terminal

__all__ = ["describe_error"]


def describe_error(error: Mapping[str, object]) -> str:
    """``error: TYPE: MESSAGE``, then the issues of a reply that did not match its schema
    (or a pick that stayed invalid), one a line, and how many repair turns were tried:
    what a person needs to fix the prompt or the schema without rerunning with ``--json``.

    The message and the issues quote what others wrote (a provider's error text, a model's
    reply): their control characters show as text (``\\x1b``), never driving a terminal."""
    text = (
        f"error: {error.get('type', 'error')}: {shown_on_terminal(str(error.get('message', '')))}"
    )
    repairs = error.get("repairs")
    if isinstance(repairs, int):
        text += f" (after {repairs} repair turn{'' if repairs == 1 else 's'})"
    issues = error.get("issues")
    if isinstance(issues, list):
        text += "".join(f"\n  {shown_on_terminal(str(issue))}" for issue in issues)
    return text
