"""The measured DuckDB query: ``SELECT sum(fn(body)[1]) FROM source``, with a warm-up first."""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence

import duckdb
import numpy as np
import pyarrow as pa

import embedtext
from embedtext.bench.measure import ProcessWatch, make_case, timed


def load_docs(con: duckdb.DuckDBPyConnection, texts, table: str = "docs") -> None:
    """``CREATE TABLE table(id, body)`` from a list or Arrow array of texts."""
    body = texts if isinstance(texts, pa.Array) else pa.array(texts, pa.string())
    docs = pa.table({"id": pa.array(np.arange(len(body), dtype=np.int64)), "body": body})
    con.register("__bench_docs", docs)
    con.execute(f"CREATE OR REPLACE TABLE {table} AS SELECT * FROM __bench_docs").fetchall()
    con.unregister("__bench_docs")


def embed_query_case(
    con: duckdb.DuckDBPyConnection,
    name: str,
    suite: str,
    *,
    fn: str,
    source: str,
    rows: int,
    tokens_per_row: float | None,
    server_pid: int | None = None,
    servers: Sequence[str] = (),
    where: str = "",
    warmup: bool = True,
    repeats: int = 1,
    **extra,
) -> dict:
    """Time full scans through ``fn`` (the median of ``repeats``, each listed in ``runs_s``); peak
    RSS of this process and of the server's tree; with ``servers`` (embedtext targets), the CPU
    their engines spent in the model's forward a row (``model_cpu_us_per_row``, from their Info)."""
    if warmup:
        # A quarter of the rows, at most one chunk: first-call costs out of the timing, without
        # measuring a small table twice.
        limit = max(1, min(2048, rows // 4))
        con.execute(f"SELECT sum({fn}(body)[1]) FROM (SELECT body FROM {source} LIMIT {limit})").fetchall()
    query = f"SELECT sum({fn}(body)[1]) FROM {source} {where}"
    model_before = model_seconds(servers)
    with ProcessWatch({"client": os.getpid()}, {"server": server_pid}) as watch:
        runs = [timed(lambda: con.execute(query).fetchall())[0] for _ in range(max(1, repeats))]
    model_spent = model_seconds(servers) - model_before
    server_rss = watch.peaks.get("server")
    per_run = {name: round(value / len(runs), 2) for name, value in watch.cpu_seconds.items()}
    # Each process's own CPU a row (client: this process; server: its main process, engines apart).
    per_row = {
        f"{who}_cpu_us_per_row": round(1e6 * seconds / rows, 2) if seconds else None
        for who, seconds in per_run.items()
        if "/" not in who
    }
    if servers:
        per_row["model_cpu_us_per_row"] = round(1e6 * model_spent / len(runs) / rows, 2) if model_spent else None
    return make_case(
        name,
        suite,
        rows=rows,
        seconds=statistics.median(runs),
        tokens_per_row=tokens_per_row,
        peak_rss_mb=watch.peaks["client"],
        server_peak_rss_mb=round(server_rss, 1) if server_rss else None,
        query=query,
        runs_s=[round(r, 3) for r in runs],
        cpu_s_per_run=per_run,
        **per_row,
        **extra,
    )


def model_seconds(targets: Sequence[str]) -> float:
    """The CPU seconds the engines of the servers at ``targets`` have spent in the model's forward
    (every model's, as each server's Info says)."""
    total = 0.0
    for target in targets:
        with embedtext.Client(target) as client:
            total += sum(m.engine_model_cpu_seconds for m in client.info(refresh=True).models)
    return total


def scan_measure(
    con: duckdb.DuckDBPyConnection, suite: str, fn: str, server_pid: int | None, servers: Sequence[str] = ()
):
    """A rounds path's measure (bench/rounds.py): one timed scan of a workload's rows through ``fn``."""
    return lambda workload, warmup: embed_query_case(
        con,
        "run",
        suite,
        fn=fn,
        source="docs",
        rows=workload.rows,
        tokens_per_row=workload.tokens,
        server_pid=server_pid,
        servers=servers,
        warmup=warmup,
    )
