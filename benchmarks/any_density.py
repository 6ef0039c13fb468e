"""How much of the package is typed ``Any``: lines naming ``Any`` per 1,000 lines.

The figure issue 13 set against httpx (8.6) and pydantic-ai (19.9); the goal is under 15.
Counts like ``grep -c '\\bAny\\b'`` over ``openprogram_yaml/**/*.py``. Run from anywhere:
``python benchmarks/any_density.py`` (``--top N`` lists the files with the most).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "openprogram_yaml"
ANY = re.compile(r"\bAny\b")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=0, help="list the N files with the most")
    args = parser.parse_args()
    per_file: dict[str, int] = {}
    total = 0
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        total += len(lines)
        per_file[str(path.relative_to(PACKAGE.parent))] = sum(bool(ANY.search(x)) for x in lines)
    count = sum(per_file.values())
    print(f"Any: {count} lines of {total}: {count / total * 1000:.1f} per 1,000 lines")
    for name, n in sorted(per_file.items(), key=lambda item: -item[1])[: args.top]:
        print(f"{n:5d}  {name}")


if __name__ == "__main__":
    main()
