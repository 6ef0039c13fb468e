"""The Jinja2 side of prompt templates, as rendering needs it: the sandbox and the loader.

With ``_jinja_analysis`` (what the compiler learns from a template's syntax tree), the only
modules that import ``jinja2``. Both are imported on first use, so importing the package
stays fast, and rendering a program loaded from the compile cache never imports the
analysis.
"""

from __future__ import annotations

import json
import types
from collections.abc import Callable, Mapping
from typing import Any

from jinja2 import BytecodeCache, StrictUndefined, TemplateSyntaxError
from jinja2.exceptions import SecurityError, TemplateNotFound
from jinja2.loaders import BaseLoader
from jinja2.runtime import Context, Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

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
    return json.dumps(value, ensure_ascii=False, indent=indent)


class PromptSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox, tightened for prompts.

    Immutable because the variables a template renders are the method's inputs, shared with
    the runtime and the session trace: a template must not be able to change them (so
    ``list.append`` and ``dict.update`` are refused), and rendering twice gives the same text.
    On top of Jinja's rules: no attribute of a class, function, method or module is readable
    at all, a few default globals are gone, and ``*`` / ``**`` cannot build huge values.
    """

    intercepted_binops = frozenset({"*", "**"})

    def __init__(
        self,
        *,
        loader: BaseLoader | None = None,
        links: Mapping[tuple[str, str], str] | None = None,
        bytecode_cache: BytecodeCache | None = None,
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
        self.filters["tojson"] = prompt_json
        # For http tool URLs (``/repos/{{ repo | path }}``); known here so templates check.
        self.filters["path"] = url_path
        self._links: Mapping[tuple[str, str], str] = links or {}

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
        return super().call_binop(context, operator, left, right)

    def join_path(self, template: str, parent: str) -> str:
        # Include names were resolved and checked at load time; a name that was not is
        # passed through unchanged and the snapshot loader refuses it.
        return self._links.get((template, parent), template)


def _check_repeat(seq: Any, count: Any) -> None:
    if not isinstance(seq, (str, list, tuple)) or not isinstance(count, int):
        return
    if len(seq) * count > MAX_REPEAT:
        raise SecurityError(f"repeating a value {count} times builds more than {MAX_REPEAT} items")


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
