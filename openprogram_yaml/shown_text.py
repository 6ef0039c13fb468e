"""Text from outside (a model's answer, a repository's file, a peer's reply) shown on a
terminal as text: its control characters and bidi overrides escaped, so it drives nothing
(no cursor moves, no clipboard writes through OSC 52, no reordered lines). Every front end
that prints such text (the command line, ``serve`` and ``mcp`` on stderr) uses this."""

from __future__ import annotations

import re

__all__ = ["shown_on_terminal"]

#: Control characters but line breaks and tabs, DEL, C1, and the bidi embeddings, overrides
#: and isolates.
_UNSHOWN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def shown_on_terminal(text: str) -> str:
    """``text`` with its control characters (but line breaks and tabs) and bidi overrides
    escaped (``\\x1b``), so that it shows on a terminal as text and drives nothing."""
    return _UNSHOWN.sub(lambda m: ascii(m.group())[1:-1], text)
