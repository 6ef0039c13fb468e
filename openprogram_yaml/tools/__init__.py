"""Tool kinds a YAML agent declares: ``python``, ``http`` and ``command``.

Each is a ``ConfiguredTool``: a spec the model sees and ``async execute(**arguments)``.
The compiler builds them from the spec models; templates arrive already compiled, so this
package never imports Jinja2, and httpx is imported only when an http tool sends a request.
"""

from __future__ import annotations

from openprogram_yaml.tools.base import ConfiguredTool, TextTemplate, ToolBuildError
from openprogram_yaml.tools.command import CommandTool
from openprogram_yaml.tools.http import BodyTemplate, HttpClients, HttpTool
from openprogram_yaml.tools.python import (
    PythonTarget,
    PythonTool,
    load_python_tool,
    schema_from_signature,
)

__all__ = [
    "BodyTemplate",
    "CommandTool",
    "ConfiguredTool",
    "HttpClients",
    "HttpTool",
    "PythonTarget",
    "PythonTool",
    "TextTemplate",
    "ToolBuildError",
    "load_python_tool",
    "schema_from_signature",
]
