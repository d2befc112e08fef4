"""Server variants side by side: the same model served with different flags or environment, each
variant a path of the comparison runner (bench/rounds.py), all up at once.

A suite that compares server settings is data: a ``VariantComparison`` (its variants and declared
ratios) and its workloads (bench/engine_overhead.py). How a variant runs each kind of workload:

  scan         DuckDB ``SELECT sum(embed_text(body)[1]) FROM docs`` over ``rows`` texts of
               ``tokens`` tokens: rows/s, and the server's CPU per row, all of its threads
               (``server_cpu_us_per_row``) and its main thread alone, where its event loop runs
               (``server_main_thread_us_per_row``), and the
               threads that step its engines (``engine_cpu_us_per_row``, in the engines' worker
               processes; None where no engine is stepped)
  single_rows  ``rows`` one-row requests, ``concurrency`` in flight, of the workload's latency
               class: latency percentiles
  parquet      the scan read from a Parquet file (the scaling suite's query), with each server
               process's RSS after it (``server_rss_by_process_mb``, summed in ``server_rss_mb``)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import duckdb

import embedtext
from embedtext.bench.corpus import BenchCorpus
from embedtext.bench.measure import make_case, tree_rss_by_process
from embedtext.bench.queries import embed_query_case, load_docs
from embedtext.bench.rounds import Ratio, RoundsPath, Workload, run_rounds
from embedtext.bench.servers import embedtext_server

KINDS = ("scan", "single_rows", "parquet")


@dataclass(frozen=True)
class Variant:
    name: str
    flags: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # (name, value) pairs for the server's environment


@dataclass(frozen=True)
class VariantComparison:
    suite: str
    prefix: str  # case names: {prefix}_{variant}_{workload}
    variants: tuple[Variant, ...]
    ratios: tuple[Ratio, ...] = ()
    flags: tuple[str, ...] = ()  # every variant's


def run_variants(
    comparison: VariantComparison,
    models: Sequence[str],
    workloads: Sequence[Workload],
    corpus: BenchCorpus,
    *,
    rounds: int,
    args: Sequence[str] = (),
    workdir: Path | None = None,
    progress=print,
) -> list[dict]:
    """Start every variant's server, then time each workload on each in rotating rounds."""
    unknown = {w.kind for w in workloads} - set(KINDS)
    if unknown:
        raise ValueError(f"workload kinds {sorted(unknown)}: a server variant runs {', '.join(KINDS)}")
    names = ", ".join(v.name for v in comparison.variants)
    progress(f"{comparison.suite}: servers side by side ({names}), {[w.label for w in workloads]}, {rounds} rounds")
    with ExitStack() as stack:
        paths = []
        connections = []
        texts: dict[str, list[str]] = {}
        for variant in comparison.variants:
            server = stack.enter_context(
                embedtext_server(
                    list(models), args=[*args, *comparison.flags, *variant.flags], env=dict(variant.env) or None
                )
            )
            con = stack.enter_context(duckdb.connect())
            embedtext.register(con, server.target)
            connections.append(con)
            paths.append(
                RoundsPath(
                    variant.name,
                    f"{comparison.prefix}_{variant.name}",
                    " ".join([*comparison.flags, *variant.flags, *(f"{k}={v}" for k, v in variant.env)]) or "defaults",
                    _measure(server, con, texts, comparison.suite),
                )
            )

        def load(workload: Workload) -> None:
            rows = corpus.texts(workload.rows, workload.tokens) if workload.kind != "parquet" else None
            if workload.kind == "scan":
                for con in connections:
                    load_docs(con, rows)
            elif workload.kind == "single_rows":
                texts[workload.label] = rows
            else:
                texts[workload.label] = [str(_write_parquet(corpus, workload, workdir))]

        return run_rounds(
            paths,
            workloads,
            suite=comparison.suite,
            rounds=rounds,
            ratios=comparison.ratios,
            load=load,
            progress=progress,
        )


def _measure(server, con: duckdb.DuckDBPyConnection, texts: dict[str, list[str]], suite: str):
    def measure(workload: Workload, warmup: bool) -> dict:
        if workload.kind == "single_rows":
            latencies, elapsed = asyncio.run(
                _single_rows(server.target, texts[workload.label], workload.concurrency, workload.latency_class)
            )
            return make_case(
                "run", suite, rows=len(latencies), seconds=elapsed, tokens_per_row=workload.tokens, latencies=latencies
            )
        parquet = workload.kind == "parquet"
        run = embed_query_case(
            con,
            "run",
            suite,
            fn="embed_text",
            source=f"read_parquet('{texts[workload.label][0]}')" if parquet else "docs",
            rows=workload.rows,
            tokens_per_row=workload.tokens,
            server_pid=server.pid,
            warmup=warmup,
        )
        cpu = run.get("cpu_s_per_run") or {}
        for key, name in (
            ("server_cpu_us_per_row", "server"),
            ("server_main_thread_us_per_row", "server:main-thread"),
            ("engine_cpu_us_per_row", "server:engine-thread"),
        ):
            run[key] = round(1e6 * cpu[name] / workload.rows, 1) if cpu.get(name) else None
        if parquet:
            run["server_rss_by_process_mb"] = tree_rss_by_process(server.pid)  # after the query
            run["server_rss_mb"] = round(sum(run["server_rss_by_process_mb"].values()), 1)
        return run

    return measure


async def _single_rows(
    target: str, texts: Sequence[str], concurrency: int, latency_class: str | None
) -> tuple[list[float], float]:
    """Send each text as its own request, ``concurrency`` at a time; latencies and elapsed seconds."""
    from embedtext.connectors.client import AsyncClient

    latencies: list[float] = []
    async with AsyncClient(target, max_in_flight=max(8, concurrency), latency_class=latency_class) as client:
        await client.embed(list(texts[:8]))  # connect and warm up
        pending = iter(texts)

        async def worker() -> None:
            for text in pending:
                t0 = time.perf_counter()
                await client.embed([text])
                latencies.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return latencies, time.perf_counter() - t0


def _write_parquet(corpus: BenchCorpus, workload: Workload, workdir: Path | None) -> Path:
    from embedtext.bench.scaling import write_rows_parquet

    if workdir is None:
        raise ValueError("parquet workloads need a workdir")
    return write_rows_parquet(corpus, workload.rows, int(workload.tokens), workdir / f"{workload.label}.parquet")
