"""Packages whose public names load on first use (so importing the package stays cheap)."""

from __future__ import annotations

import importlib
import sys

# Not from `typing`: the command line's --help imports this module and should not pay for
# `typing`; mypy reads TYPE_CHECKING by name.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``, whose names each load from
    the submodule ``exports`` names (relative to the package) when first asked for."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", package), name)
        setattr(sys.modules[package], name, value)  # asked once; a plain attribute after
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__
