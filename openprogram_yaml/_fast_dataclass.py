"""``fast_dataclass``: ``dataclasses.dataclass`` (always with slots), cheaper to apply.

Before CPython 3.13, ``dataclass`` compiles each method it generates with an ``exec`` of its
own: six for a frozen class, about half a millisecond. The classes an offline run imports
took about 20 ms that way, more than half of this package's own start-up. Here:

- a mutable class gets its ``__init__`` from ``dataclass`` (one ``exec``: such classes are
  made per model call, so their ``__init__`` stays the fastest there is);
- a frozen class is made with no ``exec`` at all: its ``__init__`` is one function shared by
  every frozen class, reading the fields, and so are the guards against assignment and the
  pickling support. Frozen objects are made while compiling, not per call;
- ``__repr__``, ``__eq__`` and ``__hash__`` are shared functions that read the fields.

Each gives what ``dataclass`` gives:

- ``__init__``: the fields that take part in ``__init__``, in order, by position or name;
  defaults and default factories; ``TypeError`` for a missing, unknown or repeated
  argument or too many positional ones; ``__post_init__`` called when defined;
- ``__repr__``: ``Name(field=value, ...)`` over the fields with ``repr=True``, recursion
  shown as ``...``;
- ``__eq__``: equal when the other is of the very same class and the fields with
  ``compare=True`` are equal, as tuples; ``NotImplemented`` otherwise;
- ``__hash__``: frozen classes hash those fields (or the ones ``field(hash=...)`` names);
  mutable ones with ``eq`` are unhashable; ``eq=False`` keeps identity for both;
- frozen: assigning or deleting any attribute raises ``FrozenInstanceError``; pickling and
  ``copy`` work.

A method the class defines itself is kept, as ``dataclass`` keeps it. The classes are
ordinary dataclasses (``dataclasses.fields``, ``replace`` and ``asdict`` work as before),
and type checkers read the decorator as ``dataclass`` (``dataclass_transform``). A seeded
test compares all of it with ``dataclass``.
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform, overload

__all__ = ["fast_dataclass"]

_C = TypeVar("_C", bound=type)
_MISSING: Any = dataclasses.MISSING
_set = object.__setattr__


@overload
def fast_dataclass(cls: _C, /) -> _C: ...


@overload
def fast_dataclass(*, frozen: bool = False, eq: bool = True) -> Callable[[_C], _C]: ...


@dataclass_transform(field_specifiers=(dataclasses.field,))
def fast_dataclass(
    cls: _C | None = None, /, *, frozen: bool = False, eq: bool = True
) -> _C | Callable[[_C], _C]:
    """``@dataclass(slots=True, frozen=..., eq=...)``, made with one ``exec`` (mutable) or
    none (frozen) instead of three or six."""

    def wrap(cls: _C) -> _C:
        own = dict(cls.__dict__)
        made: Any = dataclasses.dataclass(
            cls, init=not frozen, repr=False, eq=False, frozen=False, slots=True
        )
        fields = dataclasses.fields(made)
        if frozen:
            _make_frozen(made, own, fields)
        if "__repr__" not in own:
            made._repr_fields = tuple(f.name for f in fields if f.repr)
            made.__repr__ = _repr
        if eq:
            if "__eq__" not in own:
                made._compare_fields = tuple(f.name for f in fields if f.compare)
                made.__eq__ = _eq
            if "__hash__" not in own:
                if frozen:
                    hashed = (f for f in fields if (f.compare if f.hash is None else f.hash))
                    made._hash_fields = tuple(f.name for f in hashed)
                    made.__hash__ = _hash
                else:
                    made.__hash__ = None
        return made  # type: ignore[no-any-return]

    return wrap if cls is None else wrap(cls)


def _make_frozen(
    made: Any, own: dict[str, Any], fields: tuple[dataclasses.Field[Any], ...]
) -> None:
    for name in ("__setattr__", "__delattr__"):
        if name in own:
            raise TypeError(f"cannot overwrite attribute {name} in class {made.__name__}")
    made._init_fields = tuple((f.name, f.default, f.default_factory) for f in fields if f.init)
    made._later_fields = tuple((f.name, f.default, f.default_factory) for f in fields if not f.init)
    made._all_fields = tuple(f.name for f in fields)
    made._post_init = hasattr(made, "__post_init__")
    made.__init__ = _frozen_init
    made.__setattr__ = _refuse_setattr
    made.__delattr__ = _refuse_delattr
    if "__getstate__" not in own and "__setstate__" not in own:
        made.__getstate__ = _getstate
        made.__setstate__ = _setstate


def _frozen_init(self: Any, *args: Any, **kwargs: Any) -> None:
    cls = self.__class__
    spec = cls._init_fields
    if len(args) > len(spec):
        most = len(spec) + 1  # with self, as Python counts
        least = 1 + sum(1 for _, d, f in spec if d is f is _MISSING)
        takes = f"{most}" if least == most else f"from {least} to {most}"
        raise TypeError(
            f"{cls.__qualname__}.__init__() takes {takes} positional arguments but "
            f"{len(args) + 1} were given"
        )
    taken = 0
    for index, (name, default, factory) in enumerate(spec):
        if index < len(args):
            if name in kwargs:
                raise TypeError(
                    f"{cls.__qualname__}.__init__() got multiple values for argument {name!r}"
                )
            value = args[index]
        elif name in kwargs:
            value = kwargs[name]
            taken += 1
        elif default is not _MISSING:
            value = default
        elif factory is not _MISSING:
            value = factory()
        else:
            missing = [
                repr(n) for n, d, f in spec[index:] if n not in kwargs and d is f is _MISSING
            ]
            if len(missing) > 2:
                listed = ", ".join(missing[:-1]) + ", and " + missing[-1]
            else:
                listed = " and ".join(missing)
            plural = "s" if len(missing) > 1 else ""
            raise TypeError(
                f"{cls.__qualname__}.__init__() missing {len(missing)} required "
                f"positional argument{plural}: {listed}"
            )
        _set(self, name, value)
    if taken != len(kwargs):
        known = {name for name, _, _ in spec}
        unknown = next(k for k in kwargs if k not in known)
        raise TypeError(
            f"{cls.__qualname__}.__init__() got an unexpected keyword argument {unknown!r}"
        )
    for name, default, factory in cls._later_fields:
        if default is not _MISSING:
            _set(self, name, default)
        elif factory is not _MISSING:
            _set(self, name, factory())
    if cls._post_init:
        self.__post_init__()


def _refuse_setattr(self: Any, name: str, value: Any) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _refuse_delattr(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def _getstate(self: Any) -> list[Any]:
    return [getattr(self, name) for name in self._all_fields]


def _setstate(self: Any, state: list[Any]) -> None:
    for name, value in zip(self._all_fields, state, strict=True):
        _set(self, name, value)


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._repr_fields)
    return f"{self.__class__.__qualname__}({shown})"


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    names = self._compare_fields
    return tuple(getattr(self, n) for n in names) == tuple(getattr(other, n) for n in names)


def _hash(self: Any) -> int:
    return hash(tuple(getattr(self, name) for name in self._hash_fields))
