"""Reading a stepped server's step timeline (``embedtext serve --step-timeline FILE``,
server/engine/step_timeline.py) back: the lines of one phase, the p50 and p99 of their parts, and
what a step costs by its size.

    python -m embedtext.bench.step_timeline steps.jsonl   # parts, and step ms by tokens

>>> lines = [{"waited_ms": float(i), "step_ms": 2.0 * i, "to_loop_ms": 0.5, "worker_ms": 3.0 * i + 0.5,
...           "step_rows": i, "step_bulk_rows": i - 1} for i in range(1, 101)]
>>> count, parts = timeline_parts(lines)
>>> count, parts["waited_ms"], parts["worker_ms"]
(100, (50.0, 99.0), (150.5, 297.5))
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from embedtext.server.scheduler.latency_window import nearest_rank

# What each line says of a batch with interactive rows, in ms or rows (older files lack ``gc_ms``).
TIMELINE_PARTS = ("waited_ms", "step_ms", "step_rows", "step_bulk_rows", "to_loop_ms", "worker_ms", "gc_ms")


def read_timeline(path: Path, since: float, until: float) -> list[dict]:
    """The lines written between ``since`` and ``until`` (Unix time); none if there is no file.
    A ``.gz`` file is read as gzip (bench/results keeps timelines so)."""
    if not path.exists():
        return []
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    lines = (json.loads(line) for line in text.splitlines() if line.strip())
    return [line for line in lines if since <= line["at"] <= until]


def timeline_parts(lines: Sequence[dict]) -> tuple[int, dict[str, tuple[float, float]]]:
    """How many lines, and the p50 and p99 (nearest rank) of each of their ``TIMELINE_PARTS``
    that every line has (older timelines lack ``gc_ms``)."""
    if not lines:
        return 0, {}
    parts = {}
    for part in TIMELINE_PARTS:
        if not all(part in line for line in lines):
            continue
        values = sorted(line[part] for line in lines)
        parts[part] = (round(float(nearest_rank(values, 0.50)), 2), round(float(nearest_rank(values, 0.99)), 2))
    return len(lines), parts


def step_costs(
    lines: Sequence[dict], bands: int = 4
) -> tuple[list[tuple[int, int, float]], tuple[float, float] | None]:
    """What the steps that carried queries cost by their size: the lines split into ``bands`` of
    about equal count by tokens, each band's (steps, median tokens, median ms); and a line through
    the bands' medians, ``(fixed_ms, ms_per_1k_tokens)`` (None with fewer than two sizes). Medians,
    so that a few stalled steps do not tilt the line: a step's fixed work is what pacing cannot
    shrink.

    >>> lines = [{"step_tokens": t, "step_ms": 3.0 + t / 500} for t in (100, 200, 300, 400) * 5]
    >>> lines[0]["step_ms"] = 40.0  # one stalled step
    >>> step_costs(lines)
    ([(5, 100, 3.2), (5, 200, 3.4), (5, 300, 3.6), (5, 400, 3.8)], (3.0, 2.0))
    """
    ordered = sorted(lines, key=lambda line: line["step_tokens"])
    groups = [list(g) for g in np.array_split(np.arange(len(ordered)), min(bands, len(ordered))) if len(g)]
    table = []
    for group in groups:
        tokens = [ordered[i]["step_tokens"] for i in group]
        ms = [ordered[i]["step_ms"] for i in group]
        table.append((len(group), int(np.median(tokens)), round(float(np.median(ms)), 2)))
    sizes = {tokens for _, tokens, _ in table}
    if len(sizes) < 2:
        return table, None
    per_token, fixed = np.polyfit([t for _, t, _ in table], [ms for _, _, ms in table], 1)
    return table, (round(float(fixed), 2), round(float(per_token) * 1000, 2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A step timeline's parts, and what its steps cost by size.")
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--bands", type=int, default=4, help="token bands of the steps' cost")
    args = parser.parse_args(argv)
    for path in args.files:
        lines = read_timeline(path, 0, float("inf"))
        count, parts = timeline_parts(lines)
        print(f"{path.name}: {count} batches with queries")
        for part, (p50, p99) in parts.items():
            print(f"  {part:<15} p50 {p50:>8g}  p99 {p99:>8g}")
        table, line = step_costs(lines, args.bands) if lines else ([], None)
        for steps, tokens, ms in table:
            print(f"  steps of about {tokens:>5} tokens: median {ms:g} ms ({steps} steps)")
        if line:
            print(f"  step ms = {line[0]:g} + {line[1]:g} per 1,000 tokens (through the bands' medians)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
