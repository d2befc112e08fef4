"""Server variants side by side: the same model served with different flags or environment, each
variant a path of the rounds runner, all up at once. A suite that compares server settings is data:
a ``VariantComparison`` and its workloads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import duckdb

import embedtext
from embedtext.bench.corpus import BenchCorpus
from embedtext.bench.measure import tree_rss_by_process
from embedtext.bench.queries import embed_query_case, load_docs
from embedtext.bench.rounds import Ratio, RoundsPath, Workload, run_rounds
from embedtext.bench.servers import embedtext_server

KINDS = ("scan", "parquet")


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
    corpus: BenchCorpus | None = None,
    *,
    rounds: int,
    args: Sequence[str] = (),
    workdir: Path | None = None,
    measure: Callable[[Variant, object], Callable[[Workload, bool], dict]] | None = None,
    progress=print,
    **rounds_options,
) -> list[dict]:
    """Every variant's server up, each workload timed on each in rotating rounds; ``measure``: how a
    variant runs a workload (default: DuckDB scans of ``corpus``'s rows)."""
    unknown = {w.kind for w in workloads} - set(KINDS)
    if measure is None and unknown:
        raise ValueError(f"workload kinds {sorted(unknown)}: a server variant runs {', '.join(KINDS)}")
    names = ", ".join(v.name for v in comparison.variants)
    progress(f"{comparison.suite}: servers side by side ({names}), {[w.label for w in workloads]}, {rounds} rounds")
    with ExitStack() as stack:
        paths = []
        connections = []
        parquet: dict[str, str] = {}
        for variant in comparison.variants:
            flags = [*args, *comparison.flags, *variant.flags]
            server = stack.enter_context(embedtext_server(list(models), args=flags, env=dict(variant.env) or None))
            if measure is None:
                con = stack.enter_context(duckdb.connect())
                embedtext.register(con, server.target)
                connections.append(con)
                timed = _scan(server, con, parquet, comparison.suite)
            else:
                timed = measure(variant, server)
            description = " ".join([*comparison.flags, *variant.flags, *(f"{k}={v}" for k, v in variant.env)])
            paths.append(
                RoundsPath(variant.name, f"{comparison.prefix}_{variant.name}", description or "defaults", timed)
            )

        def load(workload: Workload) -> None:
            if measure is not None:
                return
            if workload.kind == "parquet":
                parquet[workload.label] = str(_write_parquet(corpus, workload, workdir))
                return
            rows = corpus.texts(workload.rows, workload.tokens)
            for con in connections:
                load_docs(con, rows)

        return run_rounds(
            paths,
            workloads,
            suite=comparison.suite,
            rounds=rounds,
            ratios=comparison.ratios,
            load=load,
            progress=progress,
            **rounds_options,
        )


def _scan(server, con: duckdb.DuckDBPyConnection, parquet: dict[str, str], suite: str):
    def measure(workload: Workload, warmup: bool) -> dict:
        file = parquet.get(workload.label) if workload.kind == "parquet" else None
        run = embed_query_case(
            con,
            "run",
            suite,
            fn="embed_text",
            source=f"read_parquet('{file}')" if file else "docs",
            rows=workload.rows,
            tokens_per_row=workload.tokens,
            server_pid=server.pid,
            warmup=warmup,
        )
        cpu = run.get("cpu_s_per_run") or {}
        engines = sum(seconds for name, seconds in cpu.items() if name.startswith("server/"))
        run["engine_cpu_us_per_row"] = round(1e6 * engines / workload.rows, 1) if engines else None
        if file:
            run["server_rss_by_process_mb"] = tree_rss_by_process(server.pid)  # after the query
            run["server_rss_mb"] = round(sum(run["server_rss_by_process_mb"].values()), 1)
        return run

    return measure


def _write_parquet(corpus: BenchCorpus, workload: Workload, workdir: Path | None) -> Path:
    from embedtext.bench.scaling import write_rows_parquet

    if workdir is None:
        raise ValueError("parquet workloads need a workdir")
    return write_rows_parquet(corpus, workload.rows, int(workload.tokens), workdir / f"{workload.label}.parquet")
