"""JSON text the command line writes (``--json``): readable non-ASCII text, but never a
character that drives a terminal or reorders what a reader sees.

``json.dumps(..., ensure_ascii=False)`` escapes the C0 controls but writes the C1 controls
(U+0080-U+009F: U+009B is a CSI, as ESC [ is) and the bidi controls raw. A model's or a
dataset's text could then move the cursor or rewrite lines on the terminal the JSON is
printed on. ``safe_json_text`` writes exactly those as ``\\uXXXX`` escapes: the JSON value
is unchanged (they only ever occur inside strings, where the escape means the same
character), other non-ASCII text stays readable.
"""

from __future__ import annotations

__all__ = ["safe_json_text"]

#: The C1 controls, the bidi embeddings, overrides and isolates, and the directional marks.
_ESCAPES = {
    code: f"\\u{code:04x}"
    for code in (
        *range(0x80, 0xA0),
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
        0x200E,
        0x200F,
        0x061C,
    )
}


def safe_json_text(text: str) -> str:
    """``text`` (JSON made with ``ensure_ascii=False``, secrets already redacted) with the
    C1 and bidi control characters escaped as ``\\uXXXX``."""
    return text if text.isascii() else text.translate(_ESCAPES)
