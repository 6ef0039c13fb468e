"""Helpers the runtime tests import (a uniquely named module: ``from conftest import``
would find another folder's conftest when several test folders run together)."""

from __future__ import annotations

from collections.abc import Callable

from openprogram_yaml.providers.test import ScriptedRuntime
from openprogram_yaml.runtime import Runtime

#: The ``make`` fixture: ``make(replies, caps=..., **runtime_kwargs)`` -> (Runtime, model).
Make = Callable[..., tuple[Runtime, ScriptedRuntime]]
