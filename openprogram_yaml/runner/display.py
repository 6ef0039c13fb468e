"""A run shown on a terminal as it goes: the answer streamed, tool calls as one-line events,
a spinner while waiting (``rich``).

The command line loads this module only when stdout is a terminal, without ``--json`` or
``--no-stream``: piped output stays exactly what it was, and start-up does not pay for
``rich``. The answer goes to stdout; the spinner and the event lines go to stderr, so that
what stdout holds is the answer alone. Every piece passes the run's redaction: text through
a ``StreamRedactor`` (a secret split across pieces is still hidden), lines through
``redact``. What the model or a tool wrote is shown, never obeyed: its escape sequences and
other control characters (but line breaks and tabs) show as text (``\x1b``), as the
questions of ``terminal_asker`` do.

The spinner starts once a run has been quiet for ``SPINNER_DELAY_S``, and ``rich`` is
loaded then (or for the first event line): an answer that starts sooner shows no flash of
spinner, and its first byte does not wait for ``rich`` to load (about 15 ms). Quiet means
waiting: when the wait ends late because the process was busy meanwhile (the first request
imports its HTTP library, 60 ms or more on a loaded machine), the answer may be a moment
away, so the spinner waits once more.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TextIO

from ..json_types import JSONObject, JSONValue
from ..redaction import StreamRedactor, redact
from ..shown_text import shown_on_terminal

if TYPE_CHECKING:
    from rich.console import Console
    from rich.live import Live

__all__ = ["SPINNER_DELAY_S", "RunDisplay"]

#: Arguments and results are cut to this many characters on their line.
_SHORT = 80

#: How long a run is quiet before the spinner shows.
SPINNER_DELAY_S = 0.1
#: A spinner timer this late means the loop was busy, not waiting.
_BUSY_S = 0.005


class RunDisplay:
    """The observer of one run (``execute_run(on_event=display)``) on a terminal.

    ``streams_text(agent, method)`` says whether a method's answer is text, which is shown
    as it streams; a structured reply or a pick is JSON on its way to being checked, so
    those methods show the spinner until the run ends and the CLI prints the result.
    ``quiet`` leaves out the retry lines, as ``--quiet`` asks.
    """

    def __init__(
        self,
        title: str,
        *,
        out: TextIO,
        err: TextIO,
        secrets: Iterable[str],
        streams_text: Callable[[str, str], bool],
        quiet: bool = False,
    ) -> None:
        self.out = out
        self.secrets = frozenset(secrets)
        self.streams_text = streams_text
        self.quiet = quiet
        self.title = title
        self._err = err
        self._rich: Console | None = None
        self._live: Live | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._redactor = StreamRedactor(self.secrets)
        self._text_on = False
        #: What the current method streamed since its last tool call or retry (unredacted:
        #: compared with the run's output at the end).
        self._segment: list[str] = []
        self._mid_line = False

    # --- the observer -------------------------------------------------------------------

    def __call__(self, event: JSONObject) -> None:
        kind = event.get("type")
        if kind == "method":
            self._text_on = self.streams_text(str(event.get("agent")), str(event.get("method")))
            self._end_segment()
            self._spin_later()
        elif kind == "text" and self._text_on:
            self._write(str(event.get("text") or ""))
        elif kind == "tool_use":
            self._end_segment()
            self._line(f"→ {event.get('name')}({self._short(event.get('arguments'))})")
            self._spin()
        elif kind == "tool_result":
            verb = "failed" if event.get("is_error") else "returned"
            self._line(f"← {event.get('name')} {verb}: {self._short(event.get('content'))}")
            self._spin()
        elif kind == "retry":
            # What the failed attempt streamed is void; the next attempt starts again.
            self._end_segment()
            if not self.quiet:
                status = event.get("http_status")
                what = f"HTTP {status}" if status is not None else event.get("reason")
                delay = float(str(event.get("delay_s") or 0))
                self._line(
                    f"{what} – retrying in {delay:.1f} s "
                    f"({_int(event.get('attempt')) + 1}/{event.get('max_retries')})",
                    style="yellow",
                )
            self._spin()
        elif kind == "structured_output_retry":
            issues = event.get("issues")
            first = issues[0] if isinstance(issues, list) and issues else event.get("code")
            self._line(
                f"the reply does not match the response schema ({first}); "
                f"asking for a repair ({_int(event.get('attempt'))})",
                style="yellow",
            )
            self._spin()
        elif kind == "pick":
            self._line(f"→ picked {event.get('choice')}")
            self._spin()
        elif kind == "fallback":
            # What the failed model streamed is void; the next model answers from the start.
            self._end_segment()
            self._line(
                f"{event.get('model')} failed ({event.get('reason')}) – trying {event.get('next')}",
                style="yellow",
            )
            self._spin()

    # --- the end ------------------------------------------------------------------------

    def finish(self, output: JSONValue | None) -> bool:
        """Stop the spinner and end the streamed line; whether ``output`` (the run's) has
        already been shown whole, so that the caller need not print it again."""
        shown = self._text_on and isinstance(output, str) and "".join(self._segment) == output
        self._end_segment()
        self.clear()
        return shown

    def clear(self) -> None:
        """Stop the spinner (before a question is asked on the terminal, or at the end)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._live is not None:
            self._live.stop()
            self._live = None

    # --- pieces -------------------------------------------------------------------------

    @property
    def _console(self) -> Console:
        if self._rich is None:
            from rich.console import Console

            self._rich = Console(file=self._err, highlight=False, soft_wrap=True)
        return self._rich

    def _spin_later(self, *, again: bool = True) -> None:
        """Start the spinner unless something shows within ``SPINNER_DELAY_S`` (``again``:
        or within another ``SPINNER_DELAY_S`` once the loop is free, if it was busy)."""
        if self._timer is None and self._live is None:
            with contextlib.suppress(RuntimeError):  # no loop: nothing to wait on
                loop = asyncio.get_running_loop()
                due = loop.time() + SPINNER_DELAY_S
                self._timer = loop.call_at(due, self._quiet_for_a_while, loop, due, again)

    def _quiet_for_a_while(self, loop: asyncio.AbstractEventLoop, due: float, again: bool) -> None:
        self._timer = None
        if self._mid_line:  # not while an answer is being written
            return
        if again and loop.time() - due > _BUSY_S:
            self._spin_later(again=False)
        else:
            self._spin()

    def _spin(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._live is None and self._console.is_terminal:
            from rich.live import Live
            from rich.spinner import Spinner
            from rich.text import Text

            self._live = Live(
                Spinner("dots", Text(self.title, style="dim")),
                console=self._console,
                transient=True,
                refresh_per_second=12.5,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()

    def _write(self, text: str) -> None:
        if not text:
            return
        self.clear()
        self._segment.append(text)
        shown = self._redactor.feed(text)
        if shown:
            self.out.write(_safe(shown))
            self.out.flush()
            self._mid_line = not shown.endswith("\n")

    def _end_segment(self) -> None:
        """End what was streamed: the held end of the text, and the line."""
        rest = self._redactor.flush()
        if rest:
            self.out.write(_safe(rest))
            self._mid_line = not rest.endswith("\n")
        if self._mid_line:
            self.out.write("\n")
            self._mid_line = False
        self.out.flush()
        self._segment = []

    def _short(self, value: JSONValue | None) -> str:
        """``value`` on one line, redacted, then cut to ``_SHORT`` characters (redacted
        first: a cut through a secret would leave its start)."""
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        text = " ".join(redact(text, self.secrets).split())
        return text if len(text) <= _SHORT else text[: _SHORT - 1] + "…"

    def _line(self, text: str, style: str = "dim") -> None:
        from rich.text import Text

        self.clear()
        self._console.print(Text(shown_on_terminal(redact(text, self.secrets)), style=style))


def _safe(text: str) -> str:
    """Streamed text as the terminal shows it: a line ended ``\\r\\n`` ends in ``\\n``, and
    every other control character shows as text."""
    return shown_on_terminal(text.replace("\r\n", "\n"))


def _int(value: JSONValue | None) -> int:
    return value if isinstance(value, int) else 0
