"""The start-up goals as a CI check: exit 1 when a ratio exceeds its goal by more than its margin.

    python benchmarks/check.py [--runs 11]

It measures what ``startup.py`` measures (``--help`` beside ``python -c pass``, the offline
runs beside the modules they import), in fewer rounds, and holds each ratio of
``startup.GOALS`` to its goal plus its margin (``TOLERANCE``, or ``WIDER`` for the rows it
names). The margin is there because shared CI machines drift by tens of percent within
minutes, and a check that fails on noise gets ignored; a regression that matters (a heavy
import on the start-up path, a collector left on) costs more than that. ``run_all.py``
reports the figures against the goals themselves. About 20 seconds on a 2-core machine.

It measures this checkout as installed (``startup.py --layout editable``): CI installs the
package editable, as the README says, and building a wheel is not needed to catch a
regression. That layout flatters the ratios, since the editable finder every process of the
environment imports at start-up (``re``, ``pathlib``, ``urllib``) sits on both sides:
``--help`` reads about 1.3x there against about 2.9x for the package installed from a
wheel, which is what ``startup.py`` reports against the goals by default.
"""

from __future__ import annotations

import argparse
import sys

from _common import report
from startup import GOALS, measure, ratio

#: How far above its goal a ratio may land before the check fails: 25%.
TOLERANCE = 1.25

#: Rows given a wider margin, and why. The offline run's ratio rises when the run stops
#: importing a library, which leaves both sides: issue 17 took Jinja and importlib.metadata
#: out of it (run 119 -> 100 ms, its modules 81 -> 64 ms, the difference 35 ms before and
#: after; the ratio 1.44x -> 1.56x). With 25% the check would fail a faster run; 35% still
#: fails the collector left on during start-up (1.58x -> 1.90x measured, benchmarks/README.md).
#: The goal itself (1.35x) is unchanged and reported as missed by startup.py.
WIDER = {"offline run / its modules": 1.35}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    args = parser.parse_args()
    times, _, _ = measure(args.runs)
    print(f"start-up check: median of {args.runs} interleaved runs, goal + its margin")
    failed = []
    for name, top, bottom, goal in GOALS:
        found = ratio(times, top, bottom)
        margin = WIDER.get(name, TOLERANCE)
        limit = goal * margin
        ok = found <= limit
        report(name, f"{found:.2f}x", f"<= {limit:.2f}x ({goal}x + {margin - 1:.0%})", ok)
        if not ok:
            failed.append(name)
    if failed:
        print(f"start-up goals missed beyond the tolerance: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
