"""Compile time: a generated repository of 1,000 agent files with templates and schemas.

Goals: a full ``openprogram-run check`` of the repository (whole process) within 2 s;
recompiling after one file changes (``compile_path`` on the changed agent, which compiles
the project it belongs to) within 50 ms.
The repository is written to a temporary folder and removed afterwards.

    python benchmarks/compile.py [--agents 1000] [--runs 5] [--edits 20]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import median, report

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


def openprogram_run() -> str:
    found = Path(sys.executable).parent / "openprogram-run"
    return str(found) if found.exists() else (shutil.which("openprogram-run") or "openprogram-run")


def time_check(root: Path, runs: int) -> tuple[float, str]:
    times = []
    out = ""
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(
            [openprogram_run(), "check", str(root)], capture_output=True, text=True, check=False
        )
        times.append(time.perf_counter() - start)
        out = (done.stdout + done.stderr).strip().splitlines()[-1]
        if done.returncode != 0:
            raise SystemExit(f"check failed:\n{done.stdout}{done.stderr}")
    return median(times), out


def time_recompile(files: list[Path], edits: int) -> list[float]:
    from openprogram_yaml.compile.project import compile_path

    compile_path(files[0])  # warm: imports, jinja environment
    times = []
    for n in range(edits):
        path = files[(n * 37) % len(files)]
        text = path.read_text(encoding="utf-8")
        path.write_text(text.replace("Agent number", f"Edit {n}. Agent number", 1))
        start = time.perf_counter()
        program = compile_path(path)
        times.append(time.perf_counter() - start)
        assert len(program.agents) >= 1
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--edits", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="op-compile-bench-") as tmp:
        root = Path(tmp)
        files = write_repository(root, args.agents)
        check_s, summary = time_check(root, args.runs)
        recompile = time_recompile(files, args.edits)
    print(f"compile: {args.agents} agent files ({summary}); pid {os.getpid()}")
    report(
        f"full check, whole process (median of {args.runs})",
        f"{check_s:.2f} s",
        "<= 2 s",
        check_s <= 2.0,
    )
    rec = median(recompile) * 1000
    report(
        f"recompile one changed agent (median of {args.edits})",
        f"{rec:.1f} ms",
        "<= 50 ms",
        rec <= 50,
    )


if __name__ == "__main__":
    main()
