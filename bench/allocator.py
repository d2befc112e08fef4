"""Allocator: the scaling query on vLLM-CPU engines with glibc malloc, then with tcmalloc, in one run.

The evidence for server/allocator.py. One embedtext server per allocator (the tiny model, one
replica; each stopped before the next starts), each running the same sizes in the same order as
the scaling suite does (``allocator_{glibc|tcmalloc}_{size}_rows_16tok``). Per size: rows/s and the
RSS of each server process after the query (``server_rss_by_process_mb``: the engine worker is the
one that grows). Ratios: ``allocator_rows_per_s_tcmalloc_vs_glibc_{size}`` and, per allocator,
``allocator_{name}_server_rss_{largest}_vs_{middle}`` (memory growth of the server's tree). Needs a
tcmalloc on the system (or ``EMBEDTEXT_TCMALLOC``); without one the suite says so and measures
nothing. Not in the default suites (about 8 minutes at full size):

    uv run --extra cpu embedtext bench --only allocator
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from embedtext.bench.corpus import BenchCorpus
from embedtext.bench.plan import rows_label
from embedtext.bench.scaling import run_scaling
from embedtext.bench.servers import embedtext_server
from embedtext.server.allocator import TCMALLOC_VAR, engine_allocator

SUITE = "allocator"
ALLOCATORS = ("glibc", "tcmalloc")


def run_allocator(model_dir: Path, corpus: BenchCorpus, sizes: Sequence[int], tokens: int, workdir: Path, *,
                  args: Sequence[str] = (), progress=print) -> list[dict]:
    choice = engine_allocator()
    if not choice.env:
        progress(f"allocator: skipped, nothing to compare ({choice.message})")
        return []
    cases = []
    for name, env in (("glibc", {TCMALLOC_VAR: "off"}), ("tcmalloc", {})):
        progress(f"allocator: {name}, {tuple(sizes)} rows x {tokens} tokens")
        with embedtext_server([f"tiny={model_dir}"], args=args, env=env) as server:
            for case in run_scaling(server, corpus, sizes, tokens, workdir, suite=SUITE, prefix=f"allocator_{name}"):
                case["allocator"] = name
                cases.append(case)
    return cases


def allocator_ratios(cases: Sequence[dict]) -> dict[str, float]:
    by = {(c["allocator"], c["rows"]): c for c in cases if c["suite"] == SUITE}
    sizes = sorted({rows for _, rows in by})
    ratios: dict[str, float] = {}
    for rows in sizes:
        glibc, tcmalloc = by.get(("glibc", rows)), by.get(("tcmalloc", rows))
        if glibc and tcmalloc:
            ratios[f"allocator_rows_per_s_tcmalloc_vs_glibc_{rows_label(rows)}"] = round(
                tcmalloc["rows_per_s"] / glibc["rows_per_s"], 3)
    if len(sizes) >= 2:
        big, mid = sizes[-1], sizes[-2]
        for name in ALLOCATORS:
            a, b = by.get((name, big)), by.get((name, mid))
            if a and b and a.get("server_rss_by_process_mb") and b.get("server_rss_by_process_mb"):
                growth = sum(a["server_rss_by_process_mb"].values()) / sum(b["server_rss_by_process_mb"].values())
                ratios[f"allocator_{name}_server_rss_{rows_label(big)}_vs_{rows_label(mid)}"] = round(growth, 3)
    return ratios
