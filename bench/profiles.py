"""Summaries of py-spy collapsed stacks (``py-spy record --format raw``): where the broker's CPU went.

A flame graph is the thing to look at, but a bench report needs text: for each profile, the
functions with the most *self* samples (work done in them, not their callees) and the most
*inclusive* samples (work under them), as percentages of all samples.

Run alone: ``.venv/bin/python bench/profiles.py FILE.collapsed [--top 25]``; flame graphs come from
``py-spy record --format flamegraph`` or from feeding the .collapsed file to flamegraph.pl/speedscope.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

_LINE = re.compile(r":\d+\)$")


def _frame_key(frame: str) -> str:
    """``func (path/to/file.py:123)`` -> ``func (file.py)``: aggregate a function over its lines."""
    frame = _LINE.sub(")", frame.strip())
    name, _, where = frame.partition(" (")
    if where:
        where = where.rstrip(")")
        parts = where.replace("\\", "/").split("/")
        short = "/".join(parts[-2:]) if parts[-1] in ("__init__.py", "core.py", "plugin.py") else parts[-1]
        return f"{name} ({short})"
    return name


def load(path: Path) -> tuple[Counter[str], Counter[str], int]:
    """(self samples, inclusive samples, total samples) per function of one collapsed-stack file."""
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame_key(f) for f in stack.split(";") if f]
        # py-spy puts the thread ("process 123:...") first; drop frames that are not functions
        frames = [f for f in frames if " (" in f] or frames
        total += count
        if frames:
            own[frames[-1]] += count
            for f in set(frames):
                incl[f] += count
    return own, incl, total


def summarize(path: Path, top: int = 25) -> str:
    own, incl, total = load(path)
    if not total:
        return f"### {path.stem}\n\n(no samples)\n"
    lines = [
        f"### {path.stem} ({total} samples)",
        "",
        "| self % | function | | inclusive % | function |",
        "|---:|---|---|---:|---|",
    ]
    own_top = own.most_common(top)
    incl_top = incl.most_common(top)
    for i in range(max(len(own_top), len(incl_top))):
        a = own_top[i] if i < len(own_top) else ("", 0)
        b = incl_top[i] if i < len(incl_top) else ("", 0)
        lines.append(
            f"| {100 * a[1] / total:.1f} | `{a[0]}` | | {100 * b[1] / total:.1f} | `{b[0]}` |"
            if a[0] and b[0]
            else f"| | | | {100 * b[1] / total:.1f} | `{b[0]}` |"
        )
    return "\n".join(lines) + "\n"


def summarize_dir(directory: Path, top: int = 25) -> str:
    parts = [f"# Broker profiles ({directory.name})", ""]
    for path in sorted(directory.glob("*.collapsed")):
        parts.append(summarize(path, top))
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="top functions of py-spy collapsed stacks")
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    for f in args.files:
        print(summarize_dir(f, args.top) if f.is_dir() else summarize(f, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
