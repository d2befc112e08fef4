"""Scaling: growing row counts through ``SELECT embed_text(body)`` from Parquet, so the client's
memory is the query path's. Row groups of 10,240 rows: every size from 20k up is scanned by every
DuckDB thread (one large group per file made memory grow with the size, not the rows).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Sequence
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

import embedtext
from embedtext.bench.corpus import BenchCorpus
from embedtext.bench.plan import rows_label
from embedtext.bench.queries import embed_query_case
from embedtext.bench.rounds import Ratio, RoundsPath, Workload, run_rounds

SUITE = "scaling"
ROW_GROUP_ROWS = 10_240


def run_scaling(server, corpus: BenchCorpus, sizes: Sequence[int], tokens: int, workdir: Path) -> list[dict]:
    """One case per size, in order, all on ``server`` (so later sizes see what earlier ones left)."""
    cases = []
    for rows in sizes:
        path = write_rows_parquet(corpus, rows, tokens, workdir / f"scaling_{rows}.parquet")
        con = duckdb.connect()
        embedtext.register(con, server.target)
        case = embed_query_case(
            con,
            f"scaling_{rows_label(rows)}_rows_{tokens}tok",
            SUITE,
            fn="embed_text",
            source=f"read_parquet('{path}')",
            rows=rows,
            tokens_per_row=tokens,
            server_pid=server.pid,
        )
        cases.append(case)
        con.close()
        path.unlink()
    return cases


def write_rows_parquet(corpus: BenchCorpus, rows: int, tokens: int, path: Path) -> Path:
    """``rows`` texts in a Parquet file of ``ROW_GROUP_ROWS``-row groups (scanned by every DuckDB thread)."""
    pq.write_table(pa.table({"body": corpus.repeated(rows, tokens)}), path, row_group_size=ROW_GROUP_ROWS)
    gc.collect()
    pa.default_memory_pool().release_unused()  # the table just written is not the query's memory
    return path


def scaling_ratios(cases: Sequence[dict]) -> dict[str, float]:
    mine = sorted(
        (c for c in cases if c["suite"] == SUITE and c["name"].startswith("scaling_")), key=lambda c: c["rows"]
    )
    if len(mine) < 2:
        return {}
    big, mid = mine[-1], mine[-2]
    key = f"{rows_label(big['rows'])}_vs_{rows_label(mid['rows'])}"
    ratios = {f"scaling_rows_per_s_{key}": round(big["rows_per_s"] / mid["rows_per_s"], 3)}
    if big["peak_rss_mb"] and mid["peak_rss_mb"]:
        ratios[f"scaling_peak_rss_{key}"] = round(big["peak_rss_mb"] / mid["peak_rss_mb"], 3)
    if big.get("server_peak_rss_mb") and mid.get("server_peak_rss_mb"):
        ratios[f"scaling_server_peak_rss_{key}"] = round(big["server_peak_rss_mb"] / mid["server_peak_rss_mb"], 3)
    return ratios


def run_client_scaling(
    target: str, corpus: BenchCorpus, sizes: Sequence[int], tokens: int, rounds: int, progress=print
):
    """The client's own CPU a row, ``Client.embed_arrow`` of one Arrow array of each size against a
    NULL ENGINE server (no model time: the client's packing, calls and assembly are what is left).
    A sub-batch that copied its whole parent array made it grow with the size; the ratio of the
    largest size to the smallest shows whether it stays flat."""
    arrays = {rows: corpus.repeated(rows, tokens) for rows in sizes}

    def measure(workload: Workload, warmup: bool) -> dict:
        texts = arrays[workload.rows]
        with embedtext.Client(target, latency_class="bulk") as client:
            if warmup:  # the process's first arrays of this size (allocation, page faults) out of the timing
                client.embed_arrow(texts)
            cpu, wall = time.process_time(), time.perf_counter()
            vectors = client.embed_arrow(texts)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        assert len(vectors) == workload.rows
        return {"seconds": wall, "client_cpu_us_per_row": round(1e6 * cpu / workload.rows, 3)}

    workloads = [Workload(tokens, rows, kind="client", name=f"{rows_label(rows)}_rows") for rows in sizes]
    small, big = workloads[0].label, workloads[-1].label
    ratio = Ratio(f"client_cpu_per_row_{big}_vs_{small}", "client", "client", "client_cpu_us_per_row", (big, small))
    path = RoundsPath("client", "client_scaling", "Client.embed_arrow of one array -> NULL ENGINE server", measure)
    return run_rounds([path], workloads, suite=SUITE, rounds=rounds, ratios=[ratio], progress=progress)
