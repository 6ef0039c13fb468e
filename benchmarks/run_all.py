"""Run every benchmark, one after another, each printing its figures beside its goal.

    python benchmarks/run_all.py [--quick]

``--quick`` uses fewer rounds (a smoke test); the figures in README.md come from the
default settings. Everything runs on 127.0.0.1; each script starts its own servers.
CI runs ``check.py`` instead: the start-up goals, with a tolerance, in about 20 seconds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

SCRIPTS = {
    "startup.py": ["--runs", "5"],
    "per_call.py": ["--rounds", "2"],
    "concurrency.py": ["--rounds", "2"],
    # A smoke run stays at 1,000 agents: writing and checking 10,000 takes about a minute.
    "compile.py": ["--agents", "1000", "--runs", "1", "--edits", "3"],
    "reload.py": ["--saves", "10", "--agents", "1000", "--scale-saves", "3"],
    "serve.py": ["--requests", "500", "--rounds", "1", "--sequential", "200", "--in-flight", "200"],
    "stream.py": ["--calls", "100", "--rounds", "2", "--cli-runs", "5"],
    "mcp.py": ["--calls", "50", "--rounds", "2"],
    "batch.py": ["--rows", "2000"],
}


def main() -> int:
    quick = "--quick" in sys.argv[1:]
    failed = []
    for name, quick_args in SCRIPTS.items():
        path = HERE / name
        if not path.exists():
            print(f"== {name}: not present, skipped", flush=True)
            continue
        print(f"== {name}", flush=True)
        argv = [sys.executable, str(path), *(quick_args if quick else [])]
        if subprocess.run(argv, cwd=HERE.parent, check=False).returncode != 0:
            failed.append(name)
    if failed:
        print(f"scripts that failed to run: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
