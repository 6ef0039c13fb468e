"""Compile time: generated repositories of 1,000 and 10,000 agent files with templates
and schemas.

Goals, at each size:
- a full ``openprogram-run check`` of the repository (whole process) within 2x the floor:
  a process that only reads every file of the repository and parses its YAML or JSON;
- recompiling after one agent file changes (``compile_path`` with the ``Build`` of the
  compiles before, as the reload keeps it) within 50 ms at 1,000 agents, 300 ms at 10,000;
- memory per agent (the Python heap a compiled program holds, with its build, divided by
  the agents) stated, and under 100 KB; and ``check``'s peak RSS, stated per agent file
  above that of a one-agent check.

The check's CPU time (user + system, of the process) is reported beside its wall-clock
time, as a ratio to the floor's.

The repository is written to a temporary folder and removed afterwards. ``check`` and the
floor run on the package installed from a wheel, as ``startup.py`` measures it (its
``installed_layout``: the editable install's finder, which every process of this environment
imports at start-up, would add the same ``re`` and ``pathlib`` imports to both sides);
``--layout editable`` runs them on this checkout as installed. The package's bytecode is
compiled first, as an installed package's would be (with ``PYTHONDONTWRITEBYTECODE`` set,
each ``check`` process would otherwise compile every module edited since its last compile
from source: about 50 ms of a one-agent check).

    python benchmarks/compile.py [--agents 1000,10000] [--runs 3] [--edits 9] [--layout ...]
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import gc
import json
import os
import subprocess
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

from _common import median, report
from startup import EDITABLE, Layout, installed_layout, package_folder

TEMPLATES = 50
SCHEMAS = 50


def agent_yaml(i: int) -> str:
    t, s = i % TEMPLATES, i % SCHEMAS
    return f"""version: 1
name: agent_{i:04d}
description: Generated agent {i} for the compile benchmark.
model: test
vars:
  product: Product {i}
instructions: |
  You answer questions about {{{{ product }}}}. Agent number {i}.
defaults:
  timeout_s: 60
retry:
  max_retries: 3
methods:
  classify:
    description: Label a ticket.
    inputs:
      ticket: {{type: string, description: The ticket text}}
    prompt_file: ../templates/classify_{t:02d}.md.j2
    response_schema: {{$ref: ../schemas/label_{s:02d}.json}}
  summarize:
    inputs:
      text: {{type: string}}
      words: {{type: integer, default: 50}}
    prompt: "Summarize in {{{{ words }}}} words: {{{{ text }}}}"
    response_schema:
      type: object
      required: [summary]
      properties:
        summary: {{type: string}}
  route:
    inputs: {{ticket: {{type: string}}}}
    prompt: "Where should this go? {{{{ ticket }}}}"
    choices:
      answer: {{description: We can answer it, method: summarize}}
      escalate: {{description: A human must look, value: escalated}}
"""


def write_repository(root: Path, agents: int) -> list[Path]:
    (root / "openprogram.yaml").write_text(
        "version: 1\nname: bench\nagents: [agents/*.yaml]\ntemplates: [templates]\n",
        encoding="utf-8",
    )
    (root / "agents").mkdir()
    (root / "templates").mkdir()
    (root / "schemas").mkdir()
    (root / "templates" / "footer.md.j2").write_text(
        "Answer for {{ product }}. Be brief.\n", encoding="utf-8"
    )
    for t in range(TEMPLATES):
        (root / "templates" / f"classify_{t:02d}.md.j2").write_text(
            f"Template {t}. Classify this ticket:\n{{{{ ticket }}}}\n"
            '{% include "footer.md.j2" %}\n',
            encoding="utf-8",
        )
    for s in range(SCHEMAS):
        schema = {
            "type": "object",
            "additionalProperties": False,
            "required": ["label", "confidence"],
            "properties": {
                "label": {"type": "string", "enum": [f"a{s}", "b", "c"]},
                "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            },
        }
        (root / "schemas" / f"label_{s:02d}.json").write_text(json.dumps(schema))
    files = []
    for i in range(agents):
        path = root / "agents" / f"agent_{i:04d}.yaml"
        path.write_text(agent_yaml(i), encoding="utf-8")
        files.append(path)
    return files


#: The floor ``check`` is measured against: read every file, parse the YAML and JSON ones
#: (PyYAML's C safe loader when it is there, as the spec reader does; templates are only
#: read).
FLOOR = """
import json, os, sys, yaml
loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
for folder, _, names in os.walk(sys.argv[1]):
    for name in names:
        path = os.path.join(folder, name)
        with open(path, encoding="utf-8") as stream:
            text = stream.read()
        if name.endswith(".json"):
            json.loads(text)
        elif name.endswith((".yaml", ".yml")):
            yaml.load(text, Loader=loader)
"""
#: Recompile goals: agents -> ms.
RECOMPILE_GOALS_MS = {1000: 50.0, 10000: 300.0}
MEMORY_GOAL_KB = 100.0


def _run(command: list[str]) -> tuple[float, float, int, int, str]:
    """Run ``command``: (wall s, CPU s, peak RSS KB, exit status, its output)."""
    with tempfile.TemporaryFile("w+") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss, proc.returncode, text


@dataclass
class CheckTimes:
    """Medians of ``check`` and of the floor, run alternately; ratios are per round."""

    check_s: float
    floor_s: float
    ratio: float
    cpu_ratio: float
    check_cpu_s: float
    floor_cpu_s: float
    peak_kb: int
    summary: str


def time_check(root: Path, runs: int, layout: Layout) -> CheckTimes:
    """The whole ``check`` process against the floor, alternately: wall-clock and CPU."""
    rounds = []
    peak, summary = 0, ""
    for _ in range(runs):
        floor = _run([layout.python, "-c", FLOOR, str(root)])
        check = _run([*layout.script(), "check", str(root)])
        if floor[3] != 0 or check[3] != 0:
            raise SystemExit(f"check or floor failed:\n{check[4]}{floor[4]}")
        summary = check[4].strip().splitlines()[-1]
        peak = max(peak, check[2])
        rounds.append((check[0], floor[0], check[1], floor[1]))
    return CheckTimes(
        check_s=median([r[0] for r in rounds]),
        floor_s=median([r[1] for r in rounds]),
        ratio=median([r[0] / r[1] for r in rounds]),
        cpu_ratio=median([r[2] / r[3] for r in rounds]),
        check_cpu_s=median([r[2] for r in rounds]),
        floor_cpu_s=median([r[3] for r in rounds]),
        peak_kb=peak,
        summary=summary,
    )


def time_recompile(root: Path, files: list[Path], edits: int) -> tuple[list[float], float]:
    """Recompile times after in-place edits, with the build kept; and the heap the program
    and its build hold, per agent, in KB."""
    from openprogram_yaml.compile.build import Build
    from openprogram_yaml.compile.project import compile_path

    compile_path(files[0])  # warm: imports, jinja environment
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    build = Build()
    program = compile_path(root, build=build)
    gc.collect()
    held_kb = (tracemalloc.get_traced_memory()[0] - before) / 1024 / len(program.agents)
    tracemalloc.stop()
    times = []
    for n in range(edits):
        path = files[(n * 37) % len(files)]
        text = path.read_text(encoding="utf-8")
        path.write_text(text.replace("Agent number", f"Edit {n}. Agent number", 1))
        start = time.perf_counter()
        program = compile_path(root, build=build)
        times.append(time.perf_counter() - start)
        assert len(program.agents) == len(files)
    return times, held_kb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="1000,10000", help="repository sizes")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--edits", type=int, default=9)
    parser.add_argument("--layout", choices=["installed", "editable"], default="installed")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        layout = stack.enter_context(installed_layout()) if args.layout == "installed" else EDITABLE
        measure(args, layout)


def measure(args: argparse.Namespace, layout: Layout) -> None:
    compileall.compile_dir(str(package_folder(layout)), quiet=1)
    with tempfile.TemporaryDirectory(prefix="op-compile-bench-") as tmp:
        write_repository(Path(tmp), 1)
        base_kb = _run([*layout.script(), "check", tmp])[2]  # one agent: the process itself
    for size in [int(n) for n in args.agents.split(",")]:
        with tempfile.TemporaryDirectory(prefix="op-compile-bench-") as tmp:
            root = Path(tmp)
            files = write_repository(root, size)
            times = time_check(root, args.runs, layout)
            recompile, held_kb = time_recompile(root, files, args.edits)
        print(
            f"compile: {size} agent files ({times.summary}); pid {os.getpid()}; "
            f"check and floor on the {layout.name} package"
        )
        report(
            f"full check / read-and-parse floor (median of {args.runs})",
            f"{times.check_s:.2f} s / {times.floor_s:.2f} s = {times.ratio:.2f}x",
            "<= 2x",
            times.ratio <= 2.0,
        )
        report(
            "  the same in CPU time (user + system)",
            f"{times.check_cpu_s:.2f} s / {times.floor_cpu_s:.2f} s = {times.cpu_ratio:.2f}x",
            "",
            None,
        )
        report(
            "  check's peak RSS; per agent file above one",
            f"{times.peak_kb / 1024:.0f} MB; {(times.peak_kb - base_kb) / size:.1f} KB",
            "",
            None,
        )
        rec = median(recompile) * 1000
        goal = RECOMPILE_GOALS_MS.get(size, RECOMPILE_GOALS_MS[10000])
        report(
            f"recompile one changed agent (median of {args.edits})",
            f"{rec:.1f} ms",
            f"<= {goal:.0f} ms",
            rec <= goal,
        )
        report(
            "heap a compiled agent holds (with its build)",
            f"{held_kb:.1f} KB",
            f"< {MEMORY_GOAL_KB:.0f} KB",
            held_kb < MEMORY_GOAL_KB,
        )


if __name__ == "__main__":
    main()
