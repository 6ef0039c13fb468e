"""``command`` tools: a program run with an argv list, never through a shell.

Each argv element is a template rendered with the tool's arguments and stays exactly one
argument, whatever it contains: quotes, spaces and ``;`` mean nothing here. One more guard:
an element whose text starts with ``-`` only because of an argument's value (the template
itself does not start with ``-``) is refused, since the program would read it as an option
(``rg --pre=…`` runs a command, ``head -1`` changes what ``head`` does). It passes when it
stands after a literal ``--`` element (which is how to pass such values on purpose), or when
every parameter the element reads is declared a number (``-5`` is then a number).

The program (the first element) is found with ``shutil.which``, or relative to the working
directory when it contains a ``/``; the working directory must lie inside the project.
The run is bounded by ``timeout_s`` (the whole process group is killed) and its output by
``max_output`` bytes. The program is done when it exits: what it left running that still
holds its output open is given half a second to let go, then its group is killed. A zero
exit (or one of ``ok_exit_codes``: grep exits 1 when nothing matches) returns stdout; any
other is a ``ToolError`` with the exit code and the end of stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from openprogram_yaml.errors import ToolError
from openprogram_yaml.json_types import JSONObject, JSONValue
from openprogram_yaml.redaction import StreamRedactor, env_secrets, redact
from openprogram_yaml.tools.base import (
    ConfiguredTool,
    TextTemplate,
    ToolBuildError,
    render_template,
)

__all__ = ["CommandTool"]

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MAX_OUTPUT = 64 * 1024
#: Characters of stderr (its end) shown when a command fails.
ERROR_EXCERPT_CHARS = 2000
#: Seconds what a program left running (holding its output open) has, once the program
#: exited, before its process group is killed.
LEFTOVER_WAIT_S = 0.5
#: The longest pause between checks of whether the program has exited.
EXIT_POLL_S = 0.05
_NUMERIC_TYPES = frozenset({"integer", "number"})
_READ_SIZE = 65536


class _Capture:
    """Reads a stream to the end, keeping the first (or last) ``limit`` bytes."""

    def __init__(self, limit: int, *, keep_tail: bool) -> None:
        self.limit = limit
        self.keep_tail = keep_tail
        self.data = bytearray()
        self.dropped = 0

    async def read(self, stream: asyncio.StreamReader | None) -> None:
        if stream is None:
            return
        # Read to the end even past the cap: a program blocked on a full pipe would never exit.
        while chunk := await stream.read(_READ_SIZE):
            self.data += chunk
            if len(self.data) > self.limit:
                excess = len(self.data) - self.limit
                self.dropped += excess
                if self.keep_tail:
                    del self.data[:excess]
                else:
                    del self.data[self.limit :]

    def text(self, secrets: Collection[str]) -> str:
        """What was kept, with ``secrets`` blanked out (a secret the cut went through too)."""
        text = self.data.decode("utf-8", "replace")
        if not self.dropped:
            return redact(text, secrets)
        if self.keep_tail:
            return f"[{self.dropped} earlier bytes not shown]\n{_redacted_end(text, secrets)}"
        text = StreamRedactor(secrets).feed(text)
        return f"{text}\n[truncated: {self.dropped} more bytes of output not shown]"


def _redacted_end(text: str, secrets: Collection[str]) -> str:
    """``text``, the end of a longer output, redacted. Its start may be the end of a secret
    the cut went through: read backwards, that is a stream's end, which ``StreamRedactor``
    holds back (and so leaves out here)."""
    backwards = StreamRedactor(secret[::-1] for secret in secrets).feed(text[::-1])
    return backwards[::-1]


def _numeric_parameters(parameters: Mapping[str, JSONValue]) -> frozenset[str]:
    """Parameters whose declared type admits numbers only (``null`` aside)."""
    properties = parameters.get("properties")
    if not isinstance(properties, Mapping):
        return frozenset()
    numeric = set()
    for name, schema in properties.items():
        declared = schema.get("type") if isinstance(schema, Mapping) else None
        # The schema was checked when the tool was built: ``type`` is a name or a list of them.
        types = {declared} if isinstance(declared, str) else set()
        if isinstance(declared, list):
            types = {t for t in declared if isinstance(t, str)}
        if types - {"null"} and types - {"null"} <= _NUMERIC_TYPES:
            numeric.add(name)
    return frozenset(numeric)


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


class CommandTool(ConfiguredTool):
    """A program run with templated arguments. See the module docstring."""

    kind = "command"

    def __init__(
        self,
        name: str,
        description: str,
        parameters: Mapping[str, JSONValue] | None,
        argv: Sequence[TextTemplate],
        *,
        project_root: Path,
        cwd: Path | None = None,
        timeout_s: float | None = None,
        max_output: int | None = None,
        ok_exit_codes: Collection[int] = (0,),
    ) -> None:
        super().__init__(name, description, parameters)
        timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
        max_output = DEFAULT_MAX_OUTPUT if max_output is None else max_output
        if not argv:
            raise ToolBuildError(f"tool {name!r}: the command list is empty", field="command")
        if timeout_s <= 0:
            raise ToolBuildError(f"tool {name!r}: timeout_s must be > 0", field="timeout_s")
        if max_output <= 0:
            raise ToolBuildError(f"tool {name!r}: max_output must be > 0", field="max_output")
        self.project_root = Path(project_root).resolve()
        folder = Path(cwd) if cwd is not None else self.project_root
        if not folder.is_absolute():
            folder = self.project_root / folder
        self.cwd = folder.resolve()
        if not _inside(self.cwd, self.project_root):
            raise ToolBuildError(
                f"tool {name!r}: working directory {str(folder)!r} is outside the project root "
                f"{str(self.project_root)!r}",
                field="cwd",
            )
        if not self.cwd.is_dir():
            raise ToolBuildError(
                f"tool {name!r}: working directory {str(self.cwd)!r} does not exist",
                field="cwd",
            )
        self.argv = list(argv)
        self.ok_exit_codes = frozenset(ok_exit_codes)
        # Elements whose value may start with "-": they read only parameters declared as
        # numbers (or nothing at all), so a leading "-" can only be a minus sign.
        numeric = _numeric_parameters(self.spec.parameters)
        self._may_be_negative = [template.variables <= numeric for template in self.argv]
        self.timeout_s = timeout_s
        self.max_output = max_output
        # A fixed program is found now, so a typo is a config error, not a run-time surprise.
        self._program: str | None = None
        if "{" not in self.argv[0].source:
            program = self.argv[0].render({})
            found = self._find(program)
            if found is None:
                raise ToolBuildError(f"tool {name!r}: {self._not_found(program)}", field="command")
            self._program = found

    def _find(self, program: str) -> str | None:
        if not program or "\x00" in program:
            return None
        if os.sep in program or (os.altsep and os.altsep in program):
            candidate = Path(program)
            if not candidate.is_absolute():
                candidate = self.cwd / candidate
            ok = candidate.is_file() and os.access(candidate, os.X_OK)
            return str(candidate) if ok else None
        return shutil.which(program)

    def _not_found(self, program: str) -> str:
        if os.sep in program:
            return f"program {program!r} is not an executable file (relative to {self.cwd})"
        return f"program {program!r} was not found on PATH"

    def _command_line(self, arguments: Mapping[str, JSONValue]) -> list[str]:
        variables = self.template_variables(arguments)
        rendered: list[str] = []
        after_separator = False
        for index, template in enumerate(self.argv):
            value = render_template(template, variables, f"command element {index}")
            if "\x00" in value:
                raise ToolError(f"command element {index} contains a NUL character")
            literal_dash = template.source.lstrip().startswith("-")
            if (
                index > 0
                and not after_separator
                and value.startswith("-")
                and not literal_dash
                and not self._may_be_negative[index]
            ):
                raise ToolError(
                    f"refused: command element {index} would be {value[:40]!r}, which starts with "
                    "'-' and would be read as an option; pass a value that does not start with '-'"
                )
            after_separator = after_separator or template.source.strip() == "--"
            rendered.append(value)
        return rendered

    async def _run(self, arguments: JSONObject) -> str:
        argv = self._command_line(arguments)
        program = self._program or self._find(argv[0])
        if program is None:
            raise ToolError(self._not_found(argv[0]))
        try:
            process = await asyncio.create_subprocess_exec(
                program,
                *argv[1:],
                cwd=self.cwd,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                # Its own process group, so a timeout kills what it started too.
                start_new_session=True,
            )
        except OSError as exc:
            raise ToolError(f"could not start {argv[0]!r}: {exc.strerror or exc}") from exc
        stdout = _Capture(self.max_output, keep_tail=False)
        stderr = _Capture(self.max_output, keep_tail=True)
        try:
            async with asyncio.timeout(self.timeout_s):
                await _finish(process, stdout, stderr)
        except TimeoutError:
            await _kill(process)
            raise ToolError(
                f"{argv[0]!r} did not finish within {self.timeout_s:g}s and was stopped"
            ) from None
        except BaseException:
            await _kill(process)  # cancelled: the process must not outlive its call
            raise
        code = process.returncode
        # The program has the runner's environment, keys included: what it prints of one
        # (an `env`, a traceback showing its settings) never reaches the model.
        secrets = env_secrets()
        if code == 0:
            return stdout.text(secrets) or "(no output)"
        if code in self.ok_exit_codes:
            return stdout.text(secrets) or f"(no output, exit code {code})"
        if code is not None and code < 0:
            try:
                status = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                status = f"was killed by signal {-code}"
        else:
            status = f"exited with code {code}"
        detail = stderr.text(secrets).strip() or stdout.text(secrets).strip()
        if len(detail) > ERROR_EXCERPT_CHARS:
            detail = "…" + detail[-ERROR_EXCERPT_CHARS:]  # the end says what went wrong
        raise ToolError(f"{argv[0]!r} {status}" + (f":\n{detail}" if detail else ""))


async def _exit(process: asyncio.subprocess.Process) -> None:
    """Return once the program has exited. Polled: ``process.wait()`` also waits for its
    pipes to close, which whatever it left running may keep open."""
    pause = 0.001
    while process.returncode is None:
        await asyncio.sleep(pause)
        pause = min(pause * 2, EXIT_POLL_S)


async def _finish(process: asyncio.subprocess.Process, stdout: _Capture, stderr: _Capture) -> None:
    """Read the program's output to its end and wait for it to exit.

    A program that exits while something it started in the background still holds its
    stdout or stderr (``server &``) is done: what it left gets ``LEFTOVER_WAIT_S`` to let
    go of them, then its process group is killed and the output so far is the result. (The
    call failed as a timeout, its output lost, and the leftover lived on.)
    """
    reads: asyncio.Future[object] = asyncio.ensure_future(
        asyncio.gather(stdout.read(process.stdout), stderr.read(process.stderr))
    )
    exited: asyncio.Future[object] = asyncio.ensure_future(_exit(process))
    try:
        await asyncio.wait((reads, exited), return_when=asyncio.FIRST_COMPLETED)
        if not reads.done():
            await asyncio.wait({reads}, timeout=LEFTOVER_WAIT_S)
            if not reads.done():
                _kill_group(process)
        await reads
        await process.wait()
    finally:
        for task in (reads, exited):
            task.cancel()
        await asyncio.gather(reads, exited, return_exceptions=True)


def _kill_group(process: asyncio.subprocess.Process) -> None:
    """SIGKILL the program's process group, even once the program itself has exited: what
    it started is in the group. (Its id stays the program's while any member lives.)"""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


async def _kill(process: asyncio.subprocess.Process) -> None:
    _kill_group(process)
    with contextlib.suppress(Exception):
        await process.wait()
