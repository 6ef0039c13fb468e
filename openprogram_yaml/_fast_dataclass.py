"""``fast_dataclass``: ``dataclasses.dataclass`` (always with slots), cheaper to apply.

Before CPython 3.13, ``dataclass`` compiles each method it generates with an ``exec`` of its
own: six for a frozen class, about half a millisecond. The classes an offline run imports
took about 20 ms that way, a third of this package's own start-up. Here ``dataclass``
generates only what depends on each class's fields (``__init__``, and for a frozen class
the guards against assignment); ``__repr__``, ``__eq__`` and ``__hash__`` are functions
shared by every class, reading the fields, and they give what the generated ones give:

- ``__repr__``: ``Name(field=value, ...)`` over the fields with ``repr=True``, recursion
  shown as ``...``;
- ``__eq__``: equal when the other is of the very same class and the fields with
  ``compare=True`` are equal, as tuples; ``NotImplemented`` otherwise;
- ``__hash__``: frozen classes hash those fields (or the ones ``field(hash=...)`` names);
  mutable ones with ``eq`` are unhashable; ``eq=False`` keeps identity for both.

A method the class defines itself is kept, as ``dataclass`` keeps it. The classes are
ordinary dataclasses (``dataclasses.fields``, ``replace``, ``asdict`` and pickling work as
before), and type checkers read the decorator as ``dataclass`` (``dataclass_transform``).
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform, overload

__all__ = ["fast_dataclass"]

_C = TypeVar("_C", bound=type)


@overload
def fast_dataclass(cls: _C, /) -> _C: ...


@overload
def fast_dataclass(*, frozen: bool = False, eq: bool = True) -> Callable[[_C], _C]: ...


@dataclass_transform(field_specifiers=(dataclasses.field,))
def fast_dataclass(
    cls: _C | None = None, /, *, frozen: bool = False, eq: bool = True
) -> _C | Callable[[_C], _C]:
    """``@dataclass(slots=True, frozen=..., eq=...)``, made with one or three ``exec`` calls
    instead of three or six."""

    def wrap(cls: _C) -> _C:
        own = dict(cls.__dict__)
        made: Any = dataclasses.dataclass(cls, frozen=frozen, eq=False, repr=False, slots=True)
        fields = dataclasses.fields(made)
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
