"""Start-up, whole process: ``openprogram-run --help`` and an offline run of an example.

Goals (``GOALS``): ``--help`` within 1.5x of ``python -c pass``; the offline run
(``examples/triage.yaml classify``, model ``test``) within 1.35x of a process that merely
imports every module that run needs and is not ours (found by running it and listing them),
and the first run of just-written files within 1.5x of its own modules.

Two offline runs are measured, each beside the modules it needs:

- the usual one, a run of files already compiled once: the compile cache
  (``compile/cache.py``) serves the program, so YAML and pydantic are not even imported;
- the first one, with the cache off (``OPENPROGRAM_CACHE=off``), which compiles.

The console script keeps the cyclic collector off during start-up (see ``runner/cli.py``);
the baselines held to the goal do the same, and the untuned baseline is printed beside
them. This package's bytecode is compiled first, as an installed package's would be, and
the runs use a cache folder of their own.

Where the package is installed matters. An editable install (``pip install -e .``, what the
README's commands and CI make) puts a finder in ``site-packages`` that every process of the
environment imports at start-up, ``python -c pass`` included, and it loads ``re``,
``pathlib`` and ``urllib``: both sides of every ratio then carry those imports, which hides
what this package costs. So by default (``--layout installed``) the package is installed
the way ``pip install openprogram-yaml`` leaves it: built as a wheel by pip, into a fresh
virtual environment that sees this environment's dependencies (a ``.pth`` naming its
``site-packages``, whose own ``.pth`` files, the editable finder among them, are not run),
and every side is measured on that environment's interpreter, console script included.
Building the wheel takes pip's isolated build environment (setuptools, from the package
index or pip's cache). ``--layout editable`` measures this checkout as it is installed
(what ``check.py`` guards in CI).

    python benchmarks/startup.py [--runs 31] [--layout installed|editable]
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from _common import ROOT, median, report

OFFLINE = ["examples/triage.yaml", "classify", "-i", "ticket=My invoice is wrong"]

#: (what is measured, over what, at most): each ratio held to its goal.
GOALS = [
    ("--help / python -c pass", "openprogram-run --help", "python -c pass", 1.5),
    ("offline run / its modules", "offline run", "  import its modules", 1.35),
    (
        "first offline run / its modules",
        "first offline run (cache off)",
        "  import its modules ",
        1.5,
    ),
]


@dataclass(frozen=True)
class Layout:
    """Where the measured processes run: an interpreter and the console script beside it."""

    name: str
    python: str

    def script(self) -> list[str]:
        found = Path(self.python).parent / "openprogram-run"
        if found.exists():
            return [str(found)]
        return [
            self.python,
            "-c",
            "from openprogram_yaml.runner.cli import entrypoint; entrypoint()",
        ]


EDITABLE = Layout("editable", sys.executable)


@contextlib.contextmanager
def installed_layout() -> Iterator[Layout]:
    """A fresh environment holding the package as ``pip install`` leaves it (see above)."""
    with tempfile.TemporaryDirectory(prefix="bench-installed-") as folder:
        env_dir = Path(folder) / "env"
        venv.EnvBuilder(with_pip=False, symlinks=os.name != "nt").create(env_dir)
        bindir = "Scripts" if os.name == "nt" else "bin"
        python = str(env_dir / bindir / Path(sys.executable).name)
        site = subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        # This environment's packages (the dependencies, and pip to install with), on the
        # path as a folder: the .pth files in it, the editable finder's among them, are not run.
        ours = dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")])
        Path(site, "_benchmark_dependencies.pth").write_text("\n".join(ours) + "\n")
        built = subprocess.run(
            [python, "-m", "pip", "install", "--quiet", "--no-deps", str(ROOT)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        if built.returncode != 0:
            raise SystemExit(
                f"{built.stderr}\ncould not install the package from a wheel (pip's build "
                "needs setuptools, from the package index or pip's cache); "
                "--layout editable measures this checkout as installed"
            )
        yield Layout("installed", python)


def package_folder(layout: Layout) -> Path:
    """Where ``layout``'s interpreter imports this package from."""
    done = subprocess.run(
        [layout.python, "-c", "import openprogram_yaml; print(openprogram_yaml.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),
    )
    return Path(done.stdout.strip()).parent


def libraries_needed(layout: Layout, env: dict[str, str]) -> list[str]:
    """Every module the offline run imports that is not ours: third-party and standard
    library alike, submodules included, in the order the run loads them.

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
        "names = [n for n in sys.modules if n not in before]\n"
        "print(' '.join(n for n in names if not n.startswith(('openprogram_yaml', '__'))\n"
        "    and getattr(sys.modules.get(n), '__file__', None)))\n"
    )
    done = subprocess.run(
        [layout.python, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True, env=env
    )
    return done.stdout.split()


def _importer(modules: list[str], *, quiet_gc: bool = False) -> str:
    # One import per module, in the order the run loaded them, each allowed to fail (a few
    # are platform-specific). With quiet_gc, the importer treats the cyclic collector the
    # way the console script does (off while importing, survivors frozen at exit), so the
    # comparison is between equally tuned processes.
    head, tail = ("import gc\ngc.disable()\n", "gc.freeze()\n") if quiet_gc else ("", "")
    return (
        head
        + "import importlib\n"
        + "".join(f"try: importlib.import_module({m!r})\nexcept Exception: pass\n" for m in modules)
        + tail
    )


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(
        argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env
    )
    return time.perf_counter() - start


def ratio(times: dict[str, list[float]], top: str, bottom: str) -> float:
    return median([t / b for t, b in zip(times[top], times[bottom], strict=True)])


def measure(
    runs: int, layout: Layout = EDITABLE
) -> tuple[dict[str, list[float]], list[str], list[str]]:
    """Times of every side (seconds, one per round) and the modules of both offline runs."""
    compileall.compile_dir(str(package_folder(layout)), quiet=1)
    python, script = layout.python, layout.script()
    # PYTHONSAFEPATH: `python -c` run in this checkout would otherwise import the package
    # from it (the current folder comes first on the path), not from the layout's install.
    base = {**os.environ, "PYTHONSAFEPATH": "1"}
    with tempfile.TemporaryDirectory() as cache:
        warm = {**base, "OPENPROGRAM_CACHE_DIR": cache}
        cold = {**base, "OPENPROGRAM_CACHE": "off"}
        timed([*script, *OFFLINE], warm)  # compile once: later runs find the program kept
        libs = libraries_needed(layout, warm)
        cold_libs = libraries_needed(layout, cold)
        sides = {
            "python -c pass": ([python, "-c", "pass"], warm),
            "openprogram-run --help": ([*script, "--help"], warm),
            "offline run": ([*script, *OFFLINE], warm),
            "  import its modules": ([python, "-c", _importer(libs, quiet_gc=True)], warm),
            "  the same, collector untuned": ([python, "-c", _importer(libs)], warm),
            "first offline run (cache off)": ([*script, *OFFLINE], cold),
            "  import its modules ": (
                [python, "-c", _importer(cold_libs, quiet_gc=True)],
                cold,
            ),
        }
        times: dict[str, list[float]] = {name: [] for name in sides}
        for argv, env in sides.values():
            timed(argv, env)  # warm the file cache
        # Each ratio's two sides run back to back, the one first in even rounds and the other
        # in odd ones, so machine noise falls on both alike and neither always goes first.
        pairs = [
            ("openprogram-run --help", "python -c pass"),
            ("offline run", "  import its modules"),
            ("  the same, collector untuned", None),
            ("first offline run (cache off)", "  import its modules "),
        ]
        for round_ in range(runs):
            for first, second in pairs:
                names = [first] if second is None else [first, second]
                for name in names if round_ % 2 == 0 else names[::-1]:
                    argv, env = sides[name]
                    times[name].append(timed(argv, env))
    return times, libs, cold_libs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=31)
    parser.add_argument(
        "--layout",
        choices=["installed", "editable"],
        default="installed",
        help="the package as pip install leaves it (default), or this checkout as installed",
    )
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        layout = stack.enter_context(installed_layout()) if args.layout == "installed" else EDITABLE
        times, libs, cold_libs = measure(args.runs, layout)
    where = "installed from a wheel" if args.layout == "installed" else "as this checkout is"
    print(f"startup: whole processes, median of {args.runs} interleaved runs; the package {where}")
    for name, found in (("offline run", libs), ("first offline run", cold_libs)):
        tops = sorted({m.split(".")[0] for m in found if not m.startswith("_")})
        print(f"  modules the {name} imports (not ours): {len(found)}")
        print(f"    from {', '.join(t for t in tops if '.' not in t)}")
    for name, values in times.items():
        report(name, f"{median(values) * 1000:.0f} ms")
    for name, top, bottom, goal in GOALS:
        found = ratio(times, top, bottom)
        report(name, f"{found:.2f}x", f"<= {goal}x", found <= goal)
    untuned = ratio(times, "offline run", "  the same, collector untuned")
    report("offline run / its modules, collector untuned", f"{untuned:.2f}x")
    # Beside the ratio, what it stands for in time: a module the run stops importing leaves
    # both sides, which raises the ratio while the run gets faster; the difference does not.
    pairs = zip(times["offline run"], times["  import its modules"], strict=True)
    over = median([run - modules for run, modules in pairs])
    report("offline run - its modules", f"{over * 1000:.0f} ms", "(for comparison)")


if __name__ == "__main__":
    main()
