"""How much of a chat session's conversation a method is sent (its ``history:``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..compile.program import HistoryLimit
    from ..runtimes.protocol import Message

__all__ = ["CHARS_PER_TOKEN", "estimated_tokens", "trim_history"]

#: No tokenizer is loaded for this: a message's tokens are estimated from its length, at
#: about four characters a token (English text with the common BPE vocabularies).
CHARS_PER_TOKEN = 4


def estimated_tokens(message: Message) -> int:
    """About how many tokens ``message`` takes (at least one)."""
    return max(1, -(-len(message.text()) // CHARS_PER_TOKEN))


def trim_history(history: Sequence[Message], limit: HistoryLimit) -> tuple[Message, ...]:
    """The newest messages of ``history`` within ``limit``, oldest first.

    The cut never starts on an assistant message: a conversation the model is sent opens
    with the person's message, as it did when it was held.
    """
    kept = list(history)
    if limit.max_messages is not None:
        kept = kept[len(kept) - limit.max_messages :] if limit.max_messages else []
    if limit.max_tokens is not None:
        total = 0
        start = len(kept)
        while start > 0:
            total += estimated_tokens(kept[start - 1])
            if total > limit.max_tokens:
                break
            start -= 1
        kept = kept[start:]
    while kept and kept[0].role != "user":
        kept.pop(0)
    return tuple(kept)
