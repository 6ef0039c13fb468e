"""The public API is exactly what __all__ says, and importing it is cheap."""

from __future__ import annotations

import subprocess
import sys

import openprogram_yaml


def test_all_is_sorted_and_every_name_resolves() -> None:
    names = openprogram_yaml.__all__
    assert names == sorted(names)
    assert len(set(names)) == len(names)
    for name in names:
        assert getattr(openprogram_yaml, name) is not None, name


def test_all_is_exactly_the_lazy_exports() -> None:
    assert set(openprogram_yaml.__all__) == set(openprogram_yaml._EXPORTS)


def test_importing_the_package_loads_no_heavy_library() -> None:
    code = (
        "import sys, openprogram_yaml; "
        "print(sorted(m for m in ('jinja2', 'httpx', 'pydantic', 'jsonschema', 'yaml') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


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
