"""Start-up, whole process: ``openprogram-run --help`` and an offline run of an example.

Goals: ``--help`` within 1.5x of ``python -c pass``; the offline run
(``examples/triage.yaml classify``, model ``test``) within 1.2x of a process that merely
imports the third-party libraries that run needs (found by running it and listing them).

    python benchmarks/startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from _common import ROOT, median, report

OFFLINE = ["examples/triage.yaml", "classify", "-i", "ticket=My invoice is wrong"]


def cli() -> list[str]:
    return [
        sys.executable,
        "-c",
        "from openprogram_yaml.runner.cli import entrypoint; entrypoint()",
    ]


def script() -> list[str]:
    found = Path(sys.executable).parent / "openprogram-run"
    return [str(found)] if found.exists() else cli()


def libraries_needed() -> list[str]:
    """Every module the offline run imports that is not ours: third-party and standard
    library alike, submodules included.

    Importing only top-level packages would undercount: ``import pydantic`` loads almost
    nothing until ``BaseModel`` is touched, and the async core needs ``asyncio``. What is
    left between the two sides is then this project's own code and work.
    """
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "from openprogram_yaml.runner.cli import main\n"
        f"sys.argv = ['openprogram-run', *{OFFLINE!r}]\n"
        "import io, contextlib\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(sys.argv[1:])\n"
        "names = sorted(set(sys.modules) - before)\n"
        "print(' '.join(n for n in names if not n.startswith(('openprogram_yaml', '__'))\n"
        "    and getattr(sys.modules.get(n), '__file__', None)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    return done.stdout.split()


def _importer(modules: list[str]) -> str:
    # One import per module, each allowed to fail (a few are platform- or order-specific).
    return "import importlib\n" + "".join(
        f"try: importlib.import_module({m!r})\nexcept Exception: pass\n" for m in modules
    )


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    libs = libraries_needed()
    sides = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "openprogram-run --help": [*script(), "--help"],
        "import the libraries": [sys.executable, "-c", _importer(libs)],
        "offline run": [*script(), *OFFLINE],
    }
    times: dict[str, list[float]] = {name: [] for name in sides}
    for argv in sides.values():
        timed(argv)  # warm the file cache and .pyc files
    for _ in range(args.runs):  # interleaved, so machine noise falls on every side alike
        for name, argv in sides.items():
            times[name].append(timed(argv))
    ms = {name: median(values) * 1000 for name, values in times.items()}
    help_ratio = median(
        [
            h / p
            for h, p in zip(times["openprogram-run --help"], times["python -c pass"], strict=True)
        ]
    )
    run_ratio = median(
        [r / i for r, i in zip(times["offline run"], times["import the libraries"], strict=True)]
    )
    print(f"startup: whole processes, median of {args.runs} interleaved runs")
    tops = sorted({m.split(".")[0] for m in libs})
    print(f"  modules the offline run imports (not ours): {len(libs)}, from {', '.join(tops)}")
    for name, value in ms.items():
        report(name, f"{value:.0f} ms")
    report("--help / python -c pass", f"{help_ratio:.2f}x", "<= 1.5x", help_ratio <= 1.5)
    report(
        "offline run / importing its libraries", f"{run_ratio:.2f}x", "<= 1.2x", run_ratio <= 1.2
    )


if __name__ == "__main__":
    main()
