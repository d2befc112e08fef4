"""Reading a stepped server's step timeline (``embedtext serve --step-timeline FILE``,
server/engine/step_timeline.py) back: the lines of one phase, and the p50 and p99 of their parts.

>>> lines = [{"waited_ms": float(i), "step_ms": 2.0 * i, "to_loop_ms": 0.5, "worker_ms": 3.0 * i + 0.5,
...           "step_rows": i, "step_bulk_rows": i - 1} for i in range(1, 101)]
>>> count, parts = timeline_parts(lines)
>>> count, parts["waited_ms"], parts["worker_ms"]
(100, (50.0, 99.0), (150.5, 297.5))
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from embedtext.server.latency_window import nearest_rank

# What each line says of a batch with interactive rows, in ms or rows.
TIMELINE_PARTS = ("waited_ms", "step_ms", "step_rows", "step_bulk_rows", "to_loop_ms", "worker_ms")


def read_timeline(path: Path, since: float, until: float) -> list[dict]:
    """The lines written between ``since`` and ``until`` (Unix time); none if there is no file."""
    if not path.exists():
        return []
    lines = (json.loads(text) for text in path.read_text().splitlines() if text.strip())
    return [line for line in lines if since <= line["at"] <= until]


def timeline_parts(lines: Sequence[dict]) -> tuple[int, dict[str, tuple[float, float]]]:
    """How many lines, and the p50 and p99 (nearest rank) of each of their ``TIMELINE_PARTS``."""
    if not lines:
        return 0, {}
    parts = {}
    for part in TIMELINE_PARTS:
        values = sorted(line[part] for line in lines)
        parts[part] = (round(float(nearest_rank(values, 0.50)), 2), round(float(nearest_rank(values, 0.99)), 2))
    return len(lines), parts
