"""Check that the package's imports follow its layers (shared/DESIGN.md, "Data flow").

A package may import the packages its entry in ``MAY_IMPORT`` names (and the shared modules
of ``BASE``), nothing else: no upward import and so no cycle between packages. Every import
counts, lazy or under ``TYPE_CHECKING``: a deferred import is still a dependency.

Run from the repository root: ``python .ci/import_layers.py``; exit 1 lists each violation as
``path:line: package imports other``.
"""

from __future__ import annotations

import ast
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

PACKAGE = "openprogram_yaml"

#: Modules at the package root that every layer may use; each may import only the base
#: modules listed after it (``errors`` is the root of everything).
BASE: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    "redaction": frozenset(),
    "_lazy": frozenset(),
    "_version": frozenset(),
    "json_types": frozenset(),
    "_file_writes": frozenset({"errors"}),
    # Reading a named file: regular files only, non-blocking, capped (spec and runtime).
    "_file_reads": frozenset(),
    "safe_urls": frozenset({"errors"}),
    # Who may call a server (loopback rule, bearer token): shared by serve and mcp.
    "access": frozenset(),
    # Running git on an untrusted repository (version stamps, diff's checkouts).
    "_git": frozenset(),
    # Regular expressions of a repository that would backtrack without end (tests, schemas).
    "regex_safety": frozenset(),
    # Outside text shown on a terminal as text (the command line, serve's and mcp's logs).
    "shown_text": frozenset(),
}

#: The contract, top (front ends) to bottom. Read "runner may import run, compile, …".
#: The runtime registry finds providers through entry points (strings), never by import:
#: providers implement the protocol of ``runtimes``, so the import points from them to it.
MAY_IMPORT: dict[str, frozenset[str]] = {
    # The package face and ``python -m``: the public API re-exports from anywhere.
    "(face)": frozenset(
        {
            "runner",
            "run",
            "recording",
            "compile",
            "tools",
            "spec",
            "runtime",
            "runtimes",
            "providers",
        }
    ),
    "__main__": frozenset({"runner"}),
    # Front ends: the command line, --watch, test, render; the CLI starts serve.
    "runner": frozenset(
        {
            "serve",
            "mcp",
            "run",
            "recording",
            "compile",
            "tools",
            "spec",
            "runtime",
            "runtimes",
            "providers",
            "telemetry",
        }
    ),
    # The HTTP front end (aiohttp.web): runs, questions, reloads, history, the OpenAI-compatible
    # endpoint, the web page. Beside runner, never importing it: what both need lives in run/.
    "serve": frozenset(
        {"run", "recording", "compile", "tools", "spec", "runtime", "runtimes", "telemetry"}
    ),
    # The MCP front end (the mcp SDK): methods as tools and prompts. Beside runner and serve,
    # importing neither: what front ends share lives in run/ or a base module (access).
    "mcp": frozenset({"run", "recording", "compile", "tools", "spec", "runtime", "runtimes"}),
    # A Program plus inputs -> a record; the seam every front end sits on.
    "run": frozenset({"recording", "compile", "tools", "spec", "runtime", "runtimes", "telemetry"}),
    # OpenTelemetry (an optional extra): a run's session trace nodes become spans. The
    # front ends switch it on, the run asks for it; it reads only the trace of runtime.
    "telemetry": frozenset({"runtime", "runtimes"}),
    # Record and replay wrap the selectors; the recording files are YAML (spec's PyYAML).
    "recording": frozenset({"spec", "runtime", "runtimes", "providers"}),
    # *Spec -> Program: builds validators, tools, toolsets and runtime rules.
    "compile": frozenset({"spec", "tools", "runtime", "runtimes"}),
    # Tool kinds; the http tool shares the providers' production HTTP client.
    "tools": frozenset({"runtime", "runtimes", "providers"}),
    # YAML -> *Spec: knows nothing of the runtime.
    "spec": frozenset(),
    # The Runtime class: exec loop, retries, structured output, tools, choices, trace.
    "runtime": frozenset({"runtimes"}),
    # Built-in runtimes (wire formats): know nothing of YAML nor of the Runtime class.
    "providers": frozenset({"runtimes"}),
    # The runtime protocol, registry, selection, failure classification.
    "runtimes": frozenset(),
}


def unit_of(module: str) -> str:
    """``openprogram_yaml.compile.agent`` -> ``compile``; a root module -> its name."""
    parts = module.split(".")
    if parts == [PACKAGE]:
        return "(face)"
    return parts[1]


def module_name(path: Path, root: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def imported_modules(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """Every ``openprogram_yaml`` module (or name in it) the tree imports, with its line."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target == PACKAGE:
                # ``from openprogram_yaml import x``: x is a module of the root or a name of
                # the face; both count as what they name.
                found += [(node.lineno, f"{PACKAGE}.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, target))
    return [(line, name) for line, name in found if name.split(".")[0] == PACKAGE]


def allowed(source: str, target: str) -> bool:
    if source == target:
        return True
    if target in BASE:
        return source not in BASE or target in BASE[source]
    if source in BASE:
        return False
    return target in MAY_IMPORT.get(source, frozenset())


def check(root: Path) -> list[str]:
    problems: list[str] = []
    units = {unit_of(module_name(p, root)[0]) for p in root.rglob("*.py")}
    unknown = sorted(units - set(MAY_IMPORT) - set(BASE))
    problems += [
        f"{PACKAGE}/{u}: not in the layer contract of .ci/import_layers.py" for u in unknown
    ]
    for path in sorted(root.rglob("*.py")):
        module, is_package = module_name(path, root)
        source = unit_of(module)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for line, name in imported_modules(tree, module, is_package):
            target = unit_of(name)
            if target == "__version__":
                target = "(face)"
            if not allowed(source, target):
                where = path.relative_to(root.parent)
                problems.append(f"{where}:{line}: {source} imports {target} ({name})")
    return problems


def contract_is_acyclic() -> str | None:
    graph = {name: set(deps) for name, deps in {**MAY_IMPORT, **BASE}.items()}
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        return f"the layer contract itself has a cycle: {exc.args[1]}"
    return None


def main() -> int:
    root = Path(__file__).resolve().parent.parent / PACKAGE
    problems = check(root)
    cycle = contract_is_acyclic()
    if cycle:
        problems.append(cycle)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} import(s) break the layers", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
