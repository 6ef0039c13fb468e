"""A compiled template, ready to render: what a program keeps of each prompt template.

``templates.TemplateEngine`` checks templates and makes these; rendering needs only this
module (and Jinja2, on the first render), so a program loaded from the compile cache
renders without the checker. A template made only of text and ``{{ name }}`` outputs (most
prompts; plain text too) renders without Jinja (``text_and_names``, ``fill``) when every
name is given, so a run of such prompts does not import Jinja (about 14 ms of start-up).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from openprogram_yaml.compile.paths import display_path
from openprogram_yaml.errors import OpenProgramError
from openprogram_yaml.spec.positions import Position, TextOrigin

if TYPE_CHECKING:
    from jinja2 import Template

__all__ = ["CompiledTemplate", "TemplateRenderError", "fill", "text_and_names"]

#: ``{{ name }}`` with the prompt sandbox's settings (``_jinja.PromptSandbox``: Jinja's
#: default delimiters, no line statements or comments), without whitespace control.
_NAME_OUTPUT = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
#: Names Jinja does not read from the render variables: keywords and literals, ``self``
#: (the template), and Jinja's default globals (a test checks the sandbox has no others).
_NOT_VARIABLES = frozenset(
    {"and", "or", "not", "in", "is", "if", "else", "true", "false", "none", "True", "False",
     "None", "self", "range", "dict", "namespace", "lipsum", "cycler", "joiner"}
)  # fmt: skip


def text_and_names(source: str) -> tuple[str, ...] | None:
    """``source`` as text, name, text, …, name, text when it is made only of text and
    ``{{ name }}`` outputs (plain text is one piece); None for any other Jinja syntax.

    Each text is as Jinja's lexer writes it: line breaks (``\\r\\n``, ``\\r``) as ``\\n``;
    the sandbox keeps the trailing newline. A test renders seeded texts both ways.
    """
    # "{{{ x }}" opens at the first brace: Jinja reads "{ x }" there, a dict.
    if "{%" in source or "{#" in source or "{{{" in source:
        return None
    pieces = _NAME_OUTPUT.split(source)
    if len(pieces) // 2 != source.count("{{"):  # a "{{" that opens something else
        return None
    if any(name in _NOT_VARIABLES for name in pieces[1::2]):
        return None
    if "\r" in source:
        pieces[::2] = [text.replace("\r\n", "\n").replace("\r", "\n") for text in pieces[::2]]
    return tuple(pieces)


def fill(pieces: tuple[str, ...], variables: Mapping[str, Any]) -> str | None:
    """The text ``pieces`` (from ``text_and_names``) render with ``variables``, as Jinja
    renders it (``str`` of each value); None when a name is not given (Jinja says where)."""
    if len(pieces) == 1:
        return pieces[0]
    out = list(pieces)
    for i in range(1, len(pieces), 2):
        if pieces[i] not in variables:
            return None
        value = variables[pieces[i]]
        try:
            out[i] = value if type(value) is str else str(value)  # a subclass: its __str__
        except Exception:  # Jinja raises it, and says where
            return None
    return "".join(out)


class TemplateRenderError(OpenProgramError):
    """A template failed while rendering.

    For example a declared input lacks an attribute the template reads (``ticket.title`` on
    a string), or the sandbox refused an operation. ``position`` is where in the user's files
    the failing template line is, when known.
    """

    def __init__(self, message: str, *, template: str, position: Position | None) -> None:
        self.template = template
        self.position = position
        where = f"{position.path}:{position.line}: " if position is not None else ""
        super().__init__(f"{where}template {template!r}: {message}")


@dataclass(frozen=True, eq=False, slots=True)
class CompiledTemplate:
    """A checked template, ready to render many times.

    ``variables`` are the names it reads from the render variables (across the templates it
    includes or extends); ``files`` every template file it depends on, transitively (not the
    file its own source came from: the caller knows that one).

    It holds only data (its source, and the text of every template it pulls in, as checked),
    so it pickles: the compile cache keeps compiled programs between runs.
    """

    name: str
    #: Not in the repr: an inline template may hold a secret read with ``${env:…}``.
    source: str = field(repr=False)
    variables: frozenset[str]
    files: frozenset[Path]
    origin: TextOrigin
    _sources: Mapping[str, str] = field(repr=False)
    _links: Mapping[tuple[str, str], str] = field(repr=False)
    #: False when the source holds a secret from the environment: Jinja's template code
    #: cache would write it to disk, as a constant of the generated code.
    cache_code: bool = field(default=True, repr=False)
    #: The Jinja template, generated on first render: checking a repository (or loading
    #: one to serve a few methods) never pays for code it does not run.
    _built: list[Template] = field(default_factory=list, repr=False)
    #: Its source as text and names, when it renders without Jinja (``text_and_names``),
    #: found on first use as ``_built`` is: a check compiles thousands and renders none.
    _plain: list[tuple[str, ...] | None] = field(default_factory=list, init=False, repr=False)

    @property
    def _pieces(self) -> tuple[str, ...] | None:
        if not self._plain:
            self._plain.append(text_and_names(self.source))
        return self._plain[0]

    def __reduce__(self) -> tuple[type[CompiledTemplate], tuple[object, ...]]:
        # Made again from its data: the generated code stays behind, and is generated (or
        # loaded from the template code cache) when first rendered.
        data = (self.name, self.source, self.variables, self.files, self.origin)
        return CompiledTemplate, (*data, self._sources, self._links, self.cache_code)

    @property
    def _template(self) -> Template:
        if not self._built:
            from openprogram_yaml.compile import _jinja
            from openprogram_yaml.compile.cache import template_code_cache

            root = (self.name, self.source, self.origin.path)
            env = _jinja.PromptSandbox(
                loader=_jinja.SnapshotLoader(self._sources, root=root),
                links=self._links,
                bytecode_cache=(
                    template_code_cache(Path(self.origin.path)) if self.cache_code else None
                ),
            )
            template = env.get_template(self.name)
            for key in self._sources:
                env.get_template(key)  # compile every dependency now, so render only renders
            self._built.append(template)
        return self._built[0]

    def prepare(self) -> None:
        """Generate the template's code now; otherwise the first render does."""
        if self._pieces is None:
            self._template  # noqa: B018

    def render(self, variables: Mapping[str, Any]) -> str:
        """The prompt text; raises TemplateRenderError when the template fails."""
        if self._pieces is not None:
            text = fill(self._pieces, variables)
            if text is not None:
                return text
        try:
            return self._template.render(variables)
        except Exception as exc:
            # Anything a user's template can raise (undefined attribute, sandbox refusal,
            # a bad filter argument) is translated here, at the boundary.
            raise TemplateRenderError(
                _describe_render_failure(exc), template=self.name, position=self._where(exc)
            ) from exc

    def _where(self, exc: BaseException) -> Position | None:
        # Jinja rewrites tracebacks so that template frames carry the template's file name
        # and line; the innermost such frame is the line that failed.
        position: Position | None = None
        tb: TracebackType | None = exc.__traceback__
        while tb is not None:
            filename = tb.tb_frame.f_code.co_filename
            if filename == self.origin.path:
                position = self.origin.locate(tb.tb_lineno)
            elif filename in self._sources:
                position = Position(str(display_path(Path(filename))), tb.tb_lineno, 0)
            tb = tb.tb_next
        return position


def _describe_render_failure(exc: Exception) -> str:
    # Matched by name so that this module need not import Jinja to describe its errors.
    kind = type(exc).__name__
    if kind == "SecurityError":
        return f"the sandbox refused it: {exc}"
    if kind == "UndefinedError":
        return f"{exc} (the value given does not have what the template reads)"
    return f"{kind}: {exc}"
