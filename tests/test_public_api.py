"""The public API is exactly what __all__ says, and its classes show what they hold."""

from __future__ import annotations

import ast
import dataclasses
import inspect

from support import REPO

import openprogram_yaml


def test_all_is_sorted_and_every_name_resolves() -> None:
    names = openprogram_yaml.__all__
    assert names == sorted(names)
    assert len(set(names)) == len(names)
    for name in names:
        assert getattr(openprogram_yaml, name) is not None, name


def test_all_is_exactly_the_lazy_exports() -> None:
    assert set(openprogram_yaml.__all__) == set(openprogram_yaml._EXPORTS)


def test_public_dataclasses_show_their_fields_in_their_signature() -> None:
    # help(), IDEs and inspect.signature read __init__; it must name the fields.
    shown = 0
    for name in openprogram_yaml.__all__:
        cls = getattr(openprogram_yaml, name)
        if isinstance(cls, type) and dataclasses.is_dataclass(cls):
            fields = [f.name for f in dataclasses.fields(cls) if f.init]
            assert list(inspect.signature(cls).parameters) == fields, name
            shown += 1
    assert shown >= 3  # Program, Agent and Method at least


def test_every_dataclass_of_the_package_has_a_docstring() -> None:
    # Without one, dataclass writes a __doc__ from inspect.signature when the class is
    # made: a cost at import that a line of text avoids (and the line helps readers).
    missing = []
    for path in sorted((REPO / "openprogram_yaml").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and ast.get_docstring(node) is None:
                decorators = " ".join(ast.unparse(d) for d in node.decorator_list)
                if "dataclass" in decorators:
                    missing.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}")
    assert not missing, missing


def test_runtime_used_from_python_with_the_offline_model() -> None:
    from openprogram_yaml import Runtime

    with Runtime(model="test") as rt:
        out = rt.exec(
            "Give me a label",
            response_format={
                "type": "object",
                "properties": {"label": {"type": "string"}},
                "required": ["label"],
            },
        )
    assert isinstance(out["label"], str)
