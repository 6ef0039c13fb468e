"""``python: module:function`` tools: a function of the project, called with the arguments.

The reference is resolved with importlib, with the project root first on ``sys.path`` for
the import only. Only an allow-list is accepted: modules of the project itself (a module or
package standing in the project root folder) and the installed packages the project file
names in ``python_packages``. Anything else (the standard library, third-party packages,
openprogram_yaml) is refused before it is imported, and so is a function a project module
merely re-exports from elsewhere (``from os import system``): the module that defines the
function is what counts. A deny-list was tried first and bypassed through a third-party
function that spawns processes; an allow-list has no such gap.

When the YAML gives no ``parameters``, they are derived from the signature and type hints;
the docstring's first line becomes the description when none is given. A module inside the
project whose file changed since it was imported is reloaded, so hot reload picks up edits.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import importlib
import importlib.machinery
import importlib.util
import inspect
import json
import sys
import threading
import types
import typing
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openprogram_yaml._file_reads import file_stamp
from openprogram_yaml.errors import ToolError
from openprogram_yaml.json_types import JSONObject, JSONValue
from openprogram_yaml.runtime.blocking import run_blocking
from openprogram_yaml.runtime.content import ToolContent
from openprogram_yaml.tools.base import ConfiguredTool, ToolBuildError

__all__ = ["PythonTarget", "PythonTool", "load_python_tool", "schema_from_signature"]

_import_lock = threading.Lock()
#: (mtime_ns, size) of project modules when they were imported, to notice edits.
_stamps: dict[str, tuple[int, int]] = {}


@dataclass(frozen=True, slots=True)
class PythonTarget:
    """A resolved ``module:attr``: the callable, and the module file hot reload watches."""

    ref: str
    function: Callable[..., object]
    file: Path | None


def _named(module_name: str, packages: Collection[str]) -> bool:
    return any(module_name == p or module_name.startswith(p + ".") for p in packages)


def _findable_in_project(module_name: str, root: Path) -> bool:
    """Whether the top of ``module_name`` is a module or package in the project root folder
    (looked for there alone, without importing anything)."""
    top = module_name.split(".")[0]
    if top == "__main__":
        return False
    return importlib.machinery.PathFinder.find_spec(top, [str(root)]) is not None


def _project_module(module_name: str, root: Path) -> bool:
    """Whether the imported ``module_name`` was loaded from the project root: its file is
    where its name puts it under the root (so a package of a virtualenv kept inside the
    project, ``.venv/lib/…/site-packages/x``, is not the project's code)."""
    module = sys.modules.get(module_name)
    file = _module_file(module) if module is not None else None
    if file is None or not file.is_relative_to(root):
        return False
    parts = list(file.relative_to(root).parts)
    parts[-1] = parts[-1].split(".")[0]  # mod.py, mod.cpython-311-….so
    if parts[-1] == "__init__":
        parts.pop()
    return parts == module_name.split(".")


def _not_found(ref: str, missing: str, root: Path) -> ToolBuildError:
    return ToolBuildError(
        f"python tool {ref!r}: no module named {missing!r} (looked in the project root "
        f"{str(root)!r} and the installed packages)",
        field="python",
    )


def _refusal(ref: str, module_name: str, *, defined_in: bool = False) -> ToolBuildError:
    top = module_name.split(".")[0]
    what = f"it is defined in {module_name!r}" if defined_in else f"module {module_name!r}"
    return ToolBuildError(
        f"python tool {ref!r} is refused: {what}, which is not part of the project; tools "
        f"run the project's own modules, and installed packages only when openprogram.yaml "
        f"names them: add `python_packages: [{top}]` there to allow it",
        field="python",
    )


def _module_file(module: types.ModuleType) -> Path | None:
    name = getattr(module, "__file__", None)
    return Path(name).resolve() if name else None


def _import(module_name: str, root: Path) -> types.ModuleType:
    """Import ``module_name`` with ``root`` first on sys.path; reload it if edited since."""
    with _import_lock:
        added = str(root) not in sys.path
        if added:
            sys.path.insert(0, str(root))
        try:
            importlib.invalidate_caches()
            _forget_other_projects(module_name, root)
            module = sys.modules.get(module_name)
            if module is None:
                module = importlib.import_module(module_name)
            else:
                file = _module_file(module)
                # Only the project's own modules are reloaded; libraries never change under us.
                edited = _stamps.get(module_name) not in (None, file_stamp(file) if file else None)
                if file is not None and file.is_relative_to(root) and edited:
                    module = importlib.reload(module)
            file = _module_file(module)
            if file is not None and file.is_relative_to(root):
                stamp = file_stamp(file)
                if stamp is not None:
                    _stamps[module_name] = stamp
            _note_owner(module_name, root)
            return module
        finally:
            if added:
                with contextlib.suppress(ValueError):
                    sys.path.remove(str(root))


#: Module name -> the project root it was imported from, for the project modules imported
#: here. Two projects of one process (a test run, an application compiling several) may
#: both hold a ``tools`` package; each must get its own.
_owners: dict[str, Path] = {}


def _note_owner(module_name: str, root: Path) -> None:
    parts = module_name.split(".")
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        module = sys.modules.get(name)
        file = _module_file(module) if module is not None else None
        if file is not None and file.is_relative_to(root):
            _owners[name] = root


def _forget_other_projects(module_name: str, root: Path) -> None:
    """Unload the package of ``module_name`` when another project's copy of it is loaded,
    so that importing it again finds this project's. (Programs compiled for the other
    project keep the functions they hold.)"""
    top = module_name.split(".")[0]
    owner = _owners.get(module_name, _owners.get(top))
    if owner is None or owner == root:
        return
    for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
        if _owners.get(name) == owner:
            del sys.modules[name]
            _owners.pop(name, None)
            _stamps.pop(name, None)


def load_python_tool(
    ref: str, *, project_root: Path, packages: Collection[str] = ()
) -> PythonTarget:
    """Resolve ``"module:attr"`` (``attr`` may be dotted) to a callable of the project, or
    of one of the installed ``packages`` the project allows."""
    module_name, sep, attr = ref.partition(":")
    module_name, attr = module_name.strip(), attr.strip()
    if not sep or not module_name or not attr:
        raise ToolBuildError(
            f"python tool reference {ref!r} must look like 'package.module:function'",
            field="python",
        )
    root = Path(project_root).resolve()
    named = _named(module_name, packages)
    # Checked before importing too: importing a module runs its code.
    if not named and not _findable_in_project(module_name, root):
        top = module_name.split(".")[0]
        if importlib.util.find_spec(top) is None:  # a top-level lookup imports nothing
            raise _not_found(ref, top, root)
        raise _refusal(ref, module_name)
    try:
        module = _import(module_name, root)
    except ModuleNotFoundError as exc:
        raise _not_found(ref, exc.name or module_name, root) from exc
    except SyntaxError as exc:
        raise ToolBuildError(
            f"python tool {ref!r}: {exc.filename}:{exc.lineno}: syntax error: {exc.msg}",
            field="python",
        ) from exc
    # Importing user code may raise anything, SystemExit included; report, don't crash.
    except (Exception, SystemExit) as exc:
        raise ToolBuildError(
            f"python tool {ref!r}: importing {module_name!r} failed: {type(exc).__name__}: {exc}",
            field="python",
        ) from exc

    if not named and not _project_module(module_name, root):
        raise _refusal(ref, module_name)
    target: object = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ToolBuildError(
                f"python tool {ref!r}: {module_name!r} has no attribute {attr!r}",
                field="python",
            ) from None
    function = _check_target(ref, target, root, packages)
    return PythonTarget(ref, function, _module_file(module))


def _check_target(
    ref: str, target: object, root: Path, packages: Collection[str]
) -> Callable[..., object]:
    """``target`` if it is a function a python tool may call; ``ToolBuildError`` if not."""
    if inspect.isbuiltin(target) or isinstance(target, types.BuiltinMethodType):
        raise ToolBuildError(
            f"python tool {ref!r} is refused: it is a builtin; write a function in your project",
            field="python",
        )
    if inspect.isclass(target) or not callable(target):
        kind = "a class" if inspect.isclass(target) else f"a {type(target).__name__}"
        raise ToolBuildError(f"python tool {ref!r} is {kind}, not a function", field="python")
    # A project module may re-export a library function (``from os import system``): the
    # place the function was defined is what counts.
    defined_in = getattr(inspect.unwrap(target), "__module__", None)
    if not isinstance(defined_in, str):
        raise ToolBuildError(
            f"python tool {ref!r} is refused: where it is defined cannot be told; point the "
            "tool at a function defined in your project's own code",
            field="python",
        )
    if not (_named(defined_in, packages) or _project_module(defined_in, root)):
        raise _refusal(ref, defined_in, defined_in=True)
    return target


# --- parameters from a signature ---------------------------------------------------------

_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    None: {"type": "null"},
}
_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _type_schema(hint: Any, where: str) -> dict[str, Any]:
    """JSON Schema for one annotation; ``ToolBuildError`` when it has no JSON meaning."""
    if hint is Any or hint is inspect.Parameter.empty or hint is object:
        return {}
    if hint in _SCALARS:
        return dict(_SCALARS[hint])
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        schema = _type_schema(args[0], where)
        notes = [a for a in args[1:] if isinstance(a, str)]
        if notes:
            schema["description"] = notes[0]
        return schema
    if origin is typing.Union or origin is types.UnionType:
        options = [_type_schema(a, where) for a in args]
        if all(set(o) == {"type"} and isinstance(o["type"], str) for o in options):
            return {"type": [o["type"] for o in options]}
        return {"anyOf": options}
    if origin is typing.Literal:
        schema = {"enum": list(args)}
        kinds = {_JSON_TYPES.get(type(a)) for a in args}
        if len(kinds) == 1 and None not in kinds:
            schema["type"] = kinds.pop()
        return schema
    if hint in (list, tuple, set, frozenset) or origin in (list, set, frozenset, Sequence):
        return (
            {"type": "array", "items": _type_schema(args[0], where)} if args else {"type": "array"}
        )
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": _type_schema(args[0], where)}
        items = [_type_schema(a, where) for a in args]
        return {
            "type": "array",
            "prefixItems": items,
            "minItems": len(items),
            "maxItems": len(items),
        }
    if hint is dict or origin in (dict, Mapping):
        if len(args) == 2:
            return {"type": "object", "additionalProperties": _type_schema(args[1], where)}
        return {"type": "object"}
    if inspect.isclass(hint) and issubclass(hint, enum.Enum):
        return {"enum": [member.value for member in hint]}
    raise ToolBuildError(
        f"{where}: the type {hint!r} has no JSON Schema equivalent; annotate it with str, int, "
        "float, bool, list, dict, Literal or Optional, or declare `parameters:` for the tool",
        field="parameters",
    )


def schema_from_signature(function: Callable[..., object], name: str) -> tuple[str, dict[str, Any]]:
    """``(description, parameters)`` for ``function``: its docstring's first line, and a
    JSON Schema object built from its signature, type hints and defaults."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError) as exc:
        raise ToolBuildError(
            f"tool {name!r}: cannot read the signature of the function ({exc}); declare "
            "`parameters:` for the tool",
            field="parameters",
        ) from exc
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except Exception:
        # Unresolvable forward references: fall back to "any value" rather than fail, the
        # function still runs and the YAML can declare parameters to be precise.
        hints = {}
    properties: dict[str, Any] = {}
    required: list[str] = []
    extra = False
    for param in signature.parameters.values():
        where = f"tool {name!r}, parameter {param.name!r}"
        if param.kind is param.VAR_KEYWORD:
            extra = True
            continue
        if param.kind in (param.VAR_POSITIONAL, param.POSITIONAL_ONLY):
            raise ToolBuildError(
                f"{where}: tools are called with keyword arguments, so positional-only and "
                "*args parameters cannot be filled",
                field="python",
            )
        schema = _type_schema(hints.get(param.name, inspect.Parameter.empty), where)
        if param.default is param.empty:
            required.append(param.name)
        else:
            try:
                json.dumps(param.default)
            except (TypeError, ValueError):
                pass
            else:
                schema["default"] = param.default
        properties[param.name] = schema
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    parameters["additionalProperties"] = extra
    return _first_doc_line(function), parameters


def _first_doc_line(function: Callable[..., object]) -> str:
    doc = inspect.getdoc(function) or ""
    return (doc.strip().splitlines() or [""])[0].strip()


# --- the tool ----------------------------------------------------------------------------


def _jsonable(value: object) -> object:
    """A JSON-ready stand-in for values ``json`` cannot write (dataclasses, models, sets)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if isinstance(value, enum.Enum):
        return value.value
    return str(value)


def result_text(value: object) -> str:
    """A function's return value as the model sees it: text as is, anything else as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return json.dumps(value, ensure_ascii=False, default=_jsonable)


class PythonTool(ConfiguredTool):
    """A Python function called as a tool.

    ``parameters`` and ``description`` default to what the function's signature and
    docstring say. When ``parameters`` are given, each property must be a parameter the
    function accepts.
    """

    kind = "python"

    def __init__(
        self,
        name: str,
        description: str | None,
        parameters: Mapping[str, JSONValue] | None,
        ref: str,
        project_root: Path,
        packages: Collection[str] = (),
    ) -> None:
        self.target = load_python_tool(ref, project_root=project_root, packages=packages)
        self._given = (name, description, parameters, ref, Path(project_root), tuple(packages))
        function = self.target.function
        if parameters is None:
            derived_description, parameters = schema_from_signature(function, name)
        else:
            _check_declared(name, function, parameters)
            derived_description = _first_doc_line(function)
        # An empty description counts as none: the docstring says more than nothing.
        super().__init__(name, description or derived_description, parameters)
        self._is_async = _is_async(self.target.function)

    def __reduce__(self) -> tuple[type[PythonTool], tuple[object, ...], dict[str, object]]:
        # Pickled as what it was made from (the compile cache keeps compiled programs): the
        # function is looked up again, with the project root on sys.path, and what came from
        # its signature and docstring is read from them again, as they are now. What the
        # compiler set afterwards (``confirm``) is kept as state.
        return PythonTool, self._given, {"confirm": self.confirm}

    @property
    def source_file(self) -> Path | None:
        """The module file the function comes from (hot reload watches it)."""
        return self.target.file

    @property
    def files(self) -> frozenset[Path]:
        return frozenset({self.target.file}) if self.target.file is not None else frozenset()

    async def _run(self, arguments: JSONObject) -> str | ToolContent:
        function = self.target.function
        try:
            if self._is_async:
                value = function(**arguments)  # awaited below
            else:
                # A sync function may block; a worker thread keeps the event loop free
                # (runtime.blocking: the rule, and a pool sized for batches).
                value = await run_blocking(function, **arguments)
            if inspect.isawaitable(value):
                value = await value
        except ToolError:
            raise
        except (Exception, SystemExit) as exc:  # SystemExit too: a tool must not end the run
            raise ToolError(f"{type(exc).__name__}: {exc}") from exc
        if isinstance(value, ToolContent):
            return value  # text and images, shown to the model as blocks
        try:
            return result_text(value)
        except (TypeError, ValueError) as exc:
            raise ToolError(
                f"the function returned a value that cannot be written as JSON: {exc}"
            ) from exc


def _is_async(function: Callable[..., object]) -> bool:
    if inspect.iscoroutinefunction(function):
        return True
    call = getattr(type(function), "__call__", None)  # noqa: B004
    return not inspect.isroutine(function) and inspect.iscoroutinefunction(call)


def _check_declared(
    name: str, function: Callable[..., object], declared: Mapping[str, JSONValue]
) -> None:
    try:
        params = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return  # nothing to compare against; the call itself will report a mismatch
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    accepted = {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    properties = declared.get("properties")
    unknown = sorted(set(properties) - accepted) if isinstance(properties, Mapping) else []
    if unknown:
        raise ToolBuildError(
            f"tool {name!r}: parameters {', '.join(map(repr, unknown))} are declared but "
            f"{getattr(function, '__qualname__', 'the function')} does not accept them "
            f"(it takes: {', '.join(sorted(accepted)) or 'no arguments'})",
            field="parameters",
        )
