"""The Jinja2 side of prompt templates, as rendering needs it: the sandbox and the loader.

With ``_jinja_analysis`` (what the compiler learns from a template's syntax tree), the only
modules that import ``jinja2`` (``_template_sizes`` says how long a text an operation would
build, so that the sandbox refuses it before it is built). Both are imported on first use,
so importing the package stays fast, and rendering a program loaded from the compile cache
never imports the analysis.
"""

from __future__ import annotations

import json
import time
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from functools import update_wrapper
from typing import Any

from jinja2 import (
    BytecodeCache,
    StrictUndefined,
    Template,
    TemplateSyntaxError,
    filters,
    nodes,
    pass_environment,
)
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError, TemplateNotFound
from jinja2.loaders import BaseLoader
from jinja2.nodes import EvalContext
from jinja2.runtime import Context, Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedFormatter
from jinja2.utils import pass_eval_context
from markupsafe import EscapeFormatter, Markup

from openprogram_yaml.compile._template_sizes import (
    MAX_BUILT,
    format_spec_size,
    printf_size,
    str_method_size,
)
from openprogram_yaml.safe_urls import url_path

__all__ = ["PromptSandbox", "SnapshotLoader", "TemplateSyntaxError", "prompt_json"]

#: ``'ab' * n`` and ``[x] * n`` may build at most this many characters or items.
MAX_REPEAT = 1_000_000
#: ``a ** b`` on integers may build a result of at most this many bits.
MAX_POWER_BITS = 100_000

#: Objects whose attributes lead to code, globals and modules rather than to data. A prompt
#: author reads attributes of inputs (strings, numbers, lists, mappings) and of Jinja's own
#: helpers (``loop``, namespaces, macros), never of a class, function or module.
_OPAQUE_TYPES: tuple[type, ...] = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.MethodType,
    types.BuiltinFunctionType,
    types.BuiltinMethodType,
    types.CodeType,
    types.FrameType,
    types.TracebackType,
    types.GeneratorType,
    types.CoroutineType,
    types.AsyncGeneratorType,
)

#: Default Jinja globals we drop: HTML-page helpers no prompt needs, and the usual first step
#: of template-injection payloads (``cycler.__init__.__globals__`` …). ``range`` (bounded by
#: the sandbox), ``dict`` and ``namespace`` stay.
_DROPPED_GLOBALS = ("cycler", "joiner", "lipsum")


def prompt_json(value: Any, indent: int | None = None) -> str:
    """``tojson`` for prompts: compact, keys in the caller's order, no HTML escaping.

    Jinja's own ``tojson`` escapes ``<``, ``>``, ``&`` and ``'`` as ``\\u003c`` … for safe
    embedding in HTML, and sorts keys; a model should see the JSON the way it was given.
    """
    if indent is None:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    # Each line repeats the indent once per level: built a piece at a time, and bounded.
    _check_built(len(indent) if isinstance(indent, str) else indent, "tojson's indent")
    return _bounded_concat(
        json.JSONEncoder(ensure_ascii=False, indent=indent).iterencode(value), "tojson"
    )


def _check_built(size: int, what: str) -> None:
    if size > MAX_BUILT:
        raise SecurityError(
            f"{what} would build more than {MAX_BUILT} characters, more than a template may"
        )


def _bounded_concat(pieces: Iterable[str], what: str = "the template") -> str:
    """``"".join(pieces)``, refused as soon as the text passes ``MAX_BUILT``.

    The sandbox's ``concat``: Jinja joins a template's output, a macro's, a ``{% set %}``
    block's with it, so a loop printing a long value many times stops here, not in the join.
    """
    kept: list[str] = []
    size = 0
    for piece in pieces:
        size += len(piece)
        _check_built(size, what)
        kept.append(piece)
    return "".join(kept)


#: A render may run this long: every loop step, call and include checks it (``_tick``).
MAX_RENDER_SECONDS = 10.0

#: When the render running in this thread or task must end (``_TimedTemplate.render``).
_render_deadline: ContextVar[float | None] = ContextVar("template_deadline", default=None)


class _TimedTemplate(Template):
    """A template whose render ends, refused, once it has run ``render_seconds``."""

    def render(self, *args: Any, **kwargs: Any) -> str:
        seconds = getattr(self.environment, "render_seconds", MAX_RENDER_SECONDS)
        token = _render_deadline.set(time.monotonic() + seconds)
        try:
            return super().render(*args, **kwargs)
        finally:
            _render_deadline.reset(token)


class _BoundedBuffer(list[str]):
    """What a macro, ``{% set %}``, ``{% filter %}`` or ``{% call %}`` block writes, held until
    it is joined: refused as soon as it holds more than ``MAX_BUILT`` characters."""

    __slots__ = ("_size",)

    def __init__(self) -> None:
        super().__init__()
        self._size = 0

    def append(self, piece: str) -> None:
        self._size += len(piece)
        _check_built(self._size, "this block")
        super().append(piece)

    def extend(self, pieces: Iterable[str]) -> None:
        kept = tuple(pieces)
        self._size += sum(map(len, kept))
        _check_built(self._size, "this block")
        super().extend(kept)


class _BoundedCodeGenerator(CodeGenerator):
    """Jinja's code generator, with three changes that keep a render bounded: each ``for``
    loop takes its items through ``PromptSandbox.counted`` (which checks the clock at every
    step), blocks write into a ``_BoundedBuffer``, and ``~`` goes through
    ``PromptSandbox.concat_values`` (which measures first)."""

    def visit_Template(self, node: nodes.Template, frame: Frame | None = None) -> None:
        for loop in node.find_all(nodes.For):
            counted = nodes.EnvironmentAttribute("counted", lineno=loop.iter.lineno)
            loop.iter = nodes.Call(counted, [loop.iter], [], None, None, lineno=loop.iter.lineno)
        super().visit_Template(node, frame)

    def buffer(self, frame: Frame) -> None:
        frame.buffer = self.temporary_identifier()
        self.writeline(f"{frame.buffer} = environment.new_buffer()")

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        # As Jinja's own: the same joining function, chosen the same way, measured first.
        if frame.eval_ctx.volatile:
            join = "(markup_join if context.eval_ctx.volatile else str_join)"
        elif frame.eval_ctx.autoescape:
            join = "markup_join"
        else:
            join = "str_join"
        self.write(f"environment.concat_values({join}, (")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class PromptSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox, tightened for prompts.

    Immutable because the variables a template renders are the method's inputs, shared with
    the runtime and the session trace: a template must not be able to change them (so
    ``list.append`` and ``dict.update`` are refused), and rendering twice gives the same text.
    On top of Jinja's rules: no attribute of a class, function, method or module is readable
    at all, a few default globals are gone, no operation builds a huge value (``*``, ``**``,
    ``+`` and ``~``; the widths of ``%``, ``format`` and ``str.format``; the ``str`` methods
    and filters that pad, repeat or join, measured by ``_template_sizes``; the text a
    template, macro or block puts together), and a render ends after ``render_seconds``.
    """

    intercepted_binops = frozenset({"*", "**", "%", "+"})
    concat = staticmethod(_bounded_concat)
    template_class = _TimedTemplate
    code_generator_class = _BoundedCodeGenerator

    def __init__(
        self,
        *,
        loader: BaseLoader | None = None,
        links: Mapping[tuple[str, str], str] | None = None,
        bytecode_cache: BytecodeCache | None = None,
        render_seconds: float = MAX_RENDER_SECONDS,
    ) -> None:
        super().__init__(
            undefined=StrictUndefined,
            autoescape=False,
            keep_trailing_newline=True,
            loader=loader,
            bytecode_cache=bytecode_cache,
            # A compiled template pins its files (see SnapshotLoader): no eviction, no reload.
            cache_size=-1,
            auto_reload=False,
        )
        for name in _DROPPED_GLOBALS:
            self.globals.pop(name, None)
        self.filters.update(_BOUNDED_FILTERS)
        self.filters["tojson"] = prompt_json
        # For http tool URLs (``/repos/{{ repo | path }}``); known here so templates check.
        self.filters["path"] = url_path
        self._links: Mapping[tuple[str, str], str] = links or {}
        self.render_seconds = render_seconds

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if isinstance(obj, _OPAQUE_TYPES):
            return False
        return super().is_safe_attribute(obj, attr, value)

    def unsafe_undefined(self, obj: Any, attribute: str) -> Undefined:
        # Jinja returns an Undefined that raises only when printed, so ``|map(attribute=…)``
        # or ``is defined`` could quietly carry on; a refused attribute stops the render.
        raise SecurityError(
            f"access to attribute {attribute!r} of a {type(obj).__name__!r} object is not "
            "allowed in templates"
        )

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            _check_repeat(left, right)
            _check_repeat(right, left)
        elif operator == "**" and _power_too_large(left, right):
            raise SecurityError(f"{left} ** {right} is too large for a template")
        elif operator == "%" and isinstance(left, str):
            _check_built(printf_size(left, right), "this % format")
        elif operator == "+":
            _check_sum(left, right)
        return super().call_binop(context, operator, left, right)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        # Jinja wraps a string's ``format`` here, when it is read, so that any call of it is
        # sandboxed; the methods that can build a long text are wrapped the same way.
        # (``Markup``, which ``|safe`` makes, has Python methods of the same names.)
        if not isinstance(value, (types.BuiltinMethodType, types.MethodType)) or not isinstance(
            value.__self__, str
        ):
            return None
        if value.__name__ in ("format", "format_map"):
            return _bounded_format(self, value)
        if value.__name__ in _GROWING_STR_METHODS:
            return _bounded_str_method(value)
        return None

    def _tick(self) -> None:
        deadline = _render_deadline.get()
        if deadline is not None and time.monotonic() > deadline:
            raise SecurityError(
                f"the template ran for more than {self.render_seconds:g} seconds; a loop, "
                "macro or include repeats too often"
            )

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        __self._tick()
        return super().call(__context, __obj, *args, **kwargs)

    def get_template(self, *args: Any, **kwargs: Any) -> Template:
        self._tick()  # each include, import and extends
        return super().get_template(*args, **kwargs)

    def counted(self, items: Iterable[Any]) -> Iterator[Any]:
        """The items of a ``for`` loop, the clock checked before each."""
        for item in items:
            self._tick()
            yield item

    def new_buffer(self) -> list[str]:
        return _BoundedBuffer()

    def concat_values(self, join: Callable[[Iterable[Any]], str], values: tuple[Any, ...]) -> str:
        """``a ~ b ~ …``, measured before it is joined (``ns.s ~ ns.s`` in a loop doubles)."""
        _check_built(sum(len(str(value)) for value in values), "~")
        return join(values)

    def join_path(self, template: str, parent: str) -> str:
        # Include names were resolved and checked at load time; a name that was not is
        # passed through unchanged and the snapshot loader refuses it.
        return self._links.get((template, parent), template)


def _check_repeat(seq: Any, count: Any) -> None:
    if not isinstance(seq, (str, list, tuple)) or not isinstance(count, int):
        return
    if len(seq) * count > MAX_REPEAT:
        raise SecurityError(f"repeating a value {count} times builds more than {MAX_REPEAT} items")
    if not isinstance(seq, str) and count > 1:
        # Few items, but each may be long: ``['a' * 10**6] * 10**6`` shown is 10**12 long.
        try:
            shown = len(str(seq))
        except Exception:  # an item that cannot be shown fails where it is shown
            return
        _check_built(shown * count, "repeating a list")


def _check_sum(left: Any, right: Any) -> None:
    # ``ns.s = ns.s + ns.s`` in a loop doubles each time.
    if isinstance(left, str) and isinstance(right, str):
        _check_built(len(left) + len(right), "+")
    elif (
        isinstance(left, (list, tuple))
        and isinstance(right, (list, tuple))
        and len(left) + len(right) > MAX_REPEAT
    ):
        raise SecurityError(f"adding these lists builds more than {MAX_REPEAT} items")


class _BoundedFormatter(SandboxedFormatter):
    """Jinja's sandboxed ``str.format``, each field's width and the fields' text bounded."""

    def __init__(self, env: ImmutableSandboxedEnvironment, **kwargs: Any) -> None:
        super().__init__(env, **kwargs)
        self._built = 0

    def format_field(self, value: Any, format_spec: str) -> Any:
        _check_built(format_spec_size(format_spec), "a format width")
        text = super().format_field(value, format_spec)
        self._built += len(text)
        _check_built(self._built, "this format")
        return text


class _BoundedEscapeFormatter(_BoundedFormatter, EscapeFormatter):
    pass


def _bounded_format(env: ImmutableSandboxedEnvironment, method: Any) -> Callable[..., str]:
    """``text.format`` or ``text.format_map`` through ``_BoundedFormatter`` (as Jinja's
    ``wrap_str_format`` does through its own formatter)."""
    text: str = method.__self__
    is_format_map = method.__name__ == "format_map"

    def bounded(*args: Any, **kwargs: Any) -> str:
        if is_format_map:
            if kwargs:
                raise TypeError("format_map() takes no keyword arguments")
            if len(args) != 1:
                raise TypeError(f"format_map() takes exactly one argument ({len(args)} given)")
            kwargs = args[0]
            args = ()
        formatter = (
            _BoundedEscapeFormatter(env, escape=text.escape)
            if isinstance(text, Markup)
            else _BoundedFormatter(env)
        )
        return type(text)(formatter.vformat(text, args, kwargs))

    return update_wrapper(bounded, method)


#: ``str`` methods whose result can be far longer than the text and arguments they are given.
_GROWING_STR_METHODS = frozenset(
    {"ljust", "rjust", "center", "zfill", "expandtabs", "replace", "translate", "join"}
)


def _bounded_str_method(method: Any) -> Callable[..., Any]:
    text: str = method.__self__
    name: str = method.__name__

    def bounded(*args: Any, **kwargs: Any) -> Any:
        if name == "join" and args and isinstance(args[0], Iterable):
            args = (list(args[0]), *args[1:])  # measured, then joined
        _check_built(str_method_size(text, name, args, kwargs), f"{name}()")
        return method(*args, **kwargs)

    return update_wrapper(bounded, method)


# Jinja's filters that can build a long text or list, checked first (same signatures).


def _center(value: Any, width: int = 80) -> str:
    _check_built(width if isinstance(width, int) else 0, "center")
    return filters.do_center(value, width)


def _indent(s: Any, width: int | str = 4, first: bool = False, blank: bool = False) -> str:
    text = str(s)
    step = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
    _check_built(len(text) + (text.count("\n") + 2) * step, "indent")
    return filters.do_indent(s, width, first, blank)


@pass_environment
def _wordwrap(
    environment: Any,
    s: Any,
    width: int = 79,
    break_long_words: bool = True,
    wrapstring: str | None = None,
    break_on_hyphens: bool = True,
) -> str:
    text = str(s)
    joint = environment.newline_sequence if wrapstring is None else str(wrapstring)
    # Two lines in a row hold more than ``width`` characters, or the second would have
    # fitted on the first: at most 2 * len / width lines, and 2 per paragraph more.
    lines = 2 * (text.count("\n") + 1)
    lines += 2 * len(text) // width if isinstance(width, int) and width > 0 else len(text)
    _check_built(len(text) + lines * len(joint), "wordwrap")
    return filters.do_wordwrap(
        environment, s, width, break_long_words, wrapstring, break_on_hyphens
    )


@pass_eval_context
def _replace(eval_ctx: EvalContext, s: Any, old: Any, new: Any, count: int | None = None) -> str:
    arguments = (str(old), str(new), -1 if count is None else count)
    _check_built(str_method_size(str(s), "replace", arguments, {}), "replace")
    return filters.do_replace(eval_ctx, s, old, new, count)


@pass_eval_context
def _join(
    eval_ctx: EvalContext, value: Iterable[Any], d: str = "", attribute: str | int | None = None
) -> str:
    if attribute is not None:
        value = map(filters.make_attrgetter(eval_ctx.environment, attribute), value)
    items = list(value)
    size = len(str(d)) * max(len(items) - 1, 0) + sum(len(str(item)) for item in items)
    _check_built(size, "join")
    return filters.sync_do_join(eval_ctx, items, d)


def _format(value: Any, *args: Any, **kwargs: Any) -> str:
    _check_built(printf_size(str(value), kwargs or args), "this format")
    return filters.do_format(value, *args, **kwargs)


def _batch(value: Iterable[Any], linecount: int, fill_with: Any = None) -> Iterator[list[Any]]:
    if fill_with is not None and isinstance(linecount, int) and linecount > MAX_REPEAT:
        raise SecurityError(f"a batch filled up to {linecount} items is more than {MAX_REPEAT}")
    return filters.do_batch(value, linecount, fill_with)


def _slice(value: Sequence[Any], slices: int, fill_with: Any = None) -> Iterator[list[Any]]:
    if isinstance(slices, int) and slices > MAX_REPEAT:
        raise SecurityError(f"{slices} slices are more than {MAX_REPEAT}")
    return filters.sync_do_slice(value, slices, fill_with)


_BOUNDED_FILTERS: dict[str, Callable[..., Any]] = {
    "center": _center,
    "indent": _indent,
    "wordwrap": _wordwrap,
    "replace": _replace,
    "join": _join,
    "format": _format,
    "batch": _batch,
    "slice": _slice,
}


def _power_too_large(base: Any, exponent: Any) -> bool:
    if not isinstance(base, int) or not isinstance(exponent, int) or exponent <= 0:
        return False
    return max(abs(base).bit_length(), 1) * exponent > MAX_POWER_BITS


class SnapshotLoader(BaseLoader):
    """Serves exactly the template files checked at load time, as they were then.

    Keys are the files' real paths. Render never touches the file system, and a file edited
    after the check cannot slip unchecked text into a prompt: the hot-reload runner recompiles.
    """

    def __init__(
        self, sources: Mapping[str, str], *, root: tuple[str, str, str] | None = None
    ) -> None:
        self._sources = dict(sources)
        #: (name, source, filename) of the template the others are pulled into, when it is
        #: loaded through the loader too (so that it can come from the bytecode cache).
        self._root = root

    def get_source(
        self, environment: Any, template: str
    ) -> tuple[str, str | None, Callable[[], bool] | None]:
        if self._root is not None and template == self._root[0]:
            return self._root[1], self._root[2], _always_current
        try:
            source = self._sources[template]
        except KeyError:
            raise TemplateNotFound(template) from None
        return source, template, _always_current


def _always_current() -> bool:
    return True
