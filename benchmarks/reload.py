"""Reload latency: from a file save to the new version serving.

Copies ``examples/`` to a temporary folder, watches it with the runner's ``ProgramHolder``,
then saves the example's prompt template N times (as editors do: write a new file, rename it
over the old one) and times each save until the recompiled Program is swapped in, i.e.
until the next run would use it. The time covers the filesystem event, the debounce and
the compile, and the git stamp (the copy is a fresh git checkout, as prompt repositories are;
``--no-git`` leaves git out).

Goal: median < 150 ms with the runner's settings. watchfiles' own defaults are measured
alongside for comparison.

At scale (``--agents 1000,10000``): a generated repository (``compile.py``'s) of that many
agent files is served, and one agent file is saved each way an editor saves: written in
place, and written to a temporary file renamed over it (which changes the folder of every
agent). Goals: median <= 150 ms at 1,000 agents and <= 300 ms at 10,000, either way.

    python benchmarks/reload.py [--saves 30] [--agents 1000,10000] [--scale-saves 10]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from openprogram_yaml.run.reload import DEBOUNCE_MS, STEP_MS, ProgramHolder  # noqa: E402

GOAL_MS = 150.0
#: Reload goals at scale: agents in the repository -> median save-to-serving, ms.
SCALE_GOALS_MS = {1000: 150.0, 10000: 300.0}


async def measure(agent: Path, prompt: Path, saves: int, debounce: int, step: int) -> list[float]:
    holder = ProgramHolder(agent, debounce_ms=debounce, step_ms=step)
    holder.load()
    swapped: asyncio.Queue[float] = asyncio.Queue()
    holder.listeners.append(
        lambda e: swapped.put_nowait(time.perf_counter()) if e.status == "loaded" else None
    )
    stop = asyncio.Event()
    watcher = asyncio.create_task(holder.watch(stop))
    await holder.watching.wait()
    original = prompt.read_text(encoding="utf-8")
    times: list[float] = []
    for n in range(saves):
        tmp = prompt.with_name(prompt.name + ".tmp~")
        tmp.write_text(f"{original}\n{{# save {n} #}}\n", encoding="utf-8")
        saved = time.perf_counter()
        tmp.replace(prompt)
        done = await asyncio.wait_for(swapped.get(), 10)
        times.append((done - saved) * 1000)
    stop.set()
    await watcher
    return times


async def measure_scale(root: Path, files: list[Path], saves: int) -> dict[str, list[float]]:
    """Save one agent file at a time, in place and by rename; ms until each swap."""
    holder = ProgramHolder(root)
    holder.load()
    swapped: asyncio.Queue[float] = asyncio.Queue()
    holder.listeners.append(
        lambda e: swapped.put_nowait(time.perf_counter()) if e.status == "loaded" else None
    )
    stop = asyncio.Event()
    watcher = asyncio.create_task(holder.watch(stop))
    await holder.watching.wait()
    times: dict[str, list[float]] = {"in place": [], "rename": []}
    for n in range(saves):
        for how, took in times.items():
            path = files[(n * 37 + len(took) * 11) % len(files)]
            text = path.read_text(encoding="utf-8").replace(
                "Agent number", f"Save {n} {how}. Agent number", 1
            )
            if how == "rename":
                tmp = path.with_name(path.name + ".tmp~")
                tmp.write_text(text, encoding="utf-8")
                saved = time.perf_counter()
                tmp.replace(path)
            else:
                saved = time.perf_counter()
                path.write_text(text, encoding="utf-8")
            done = await asyncio.wait_for(swapped.get(), 60)
            took.append((done - saved) * 1000)
    stop.set()
    await watcher
    return times


def scale(sizes: list[int], saves: int) -> bool:
    from compile import write_repository

    ok = True
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="op-reload-bench-") as tmp:
            root = Path(tmp)
            files = write_repository(root, size)
            times = asyncio.run(measure_scale(root, files, saves))
        goal = SCALE_GOALS_MS.get(size)
        for how, took in times.items():
            med = statistics.median(took)
            met = goal is None or med <= goal
            ok = ok and met
            verdict = f"goal: median <= {goal:.0f} ms  {'ok' if met else 'MISSED'}" if goal else ""
            print(
                f"{size:>6} agents, save {how:<8}: median {med:6.1f} ms, "
                f"max {max(took):6.1f} ms ({len(took)} saves)   {verdict}"
            )
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=30)
    parser.add_argument("--no-git", action="store_true", help="do not make the copy a checkout")
    parser.add_argument(
        "--agents", default="1000,10000", help="repository sizes to reload at ('' for none)"
    )
    parser.add_argument("--scale-saves", type=int, default=10)
    args = parser.parse_args()
    configs = [
        ("runner settings", DEBOUNCE_MS, STEP_MS),
        ("step 20 ms", DEBOUNCE_MS, 20),
        ("watchfiles defaults", 1600, 50),
    ]
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "examples"
        shutil.copytree(ROOT / "examples", work)
        if not args.no_git:
            git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com"]
            for step_args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "examples"]):
                subprocess.run([*git, *step_args], cwd=work, check=True, capture_output=True)
        agent = work / "triage.yaml"
        prompt = work / "prompts" / "draft_reply.md.j2"
        for name, debounce, step in configs:
            times = asyncio.run(measure(agent, prompt, args.saves, debounce, step))
            med = statistics.median(times)
            p90 = sorted(times)[int(len(times) * 0.9) - 1]
            line = (
                f"{name:<20} debounce {debounce:>4} ms, step {step:>2} ms: "
                f"median {med:6.1f} ms, p90 {p90:6.1f} ms, max {max(times):6.1f} ms "
                f"({len(times)} saves)"
            )
            if name == "runner settings":
                ok = med < GOAL_MS
                line += f"   goal: median < {GOAL_MS:.0f} ms  {'ok' if ok else 'MISSED'}"
            print(line)
    print("(git stamp included)" if not args.no_git else "(no git)")
    sizes = [int(n) for n in args.agents.split(",") if n.strip()]
    if sizes:
        ok = scale(sizes, args.scale_saves) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
