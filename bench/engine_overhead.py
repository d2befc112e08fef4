"""Engine overhead: the host CPU each engine path spends per row, besides the model's own compute.

Each engine path is a server variant (bench/variants.py), up side by side, timed on DuckDB scans in
rotating rounds, as the server feeds its engines: one bulk engine per server (``--replicas 1
--interactive-replica off``), batches as the server's batcher builds them. Per case, on one line, a
row's whole host budget:

  engine_cpu_us_per_row   the thread that steps the engine (its own CPU time, not wall time: in
                          the replica's worker process, the thread named ENGINE_THREAD_NAME)
  server_cpu_us_per_row   the server process: gRPC, tokenizing, batching and dispatch
  rows_per_s

Two models: ``overhead``, a generated BERT whose compute is negligible (1 layer, hidden 32), where
the engine thread's CPU is nearly all per-row bookkeeping; and the default model, where the engine
thread also takes its part of the model's compute. Rows of 50 and 512 tokens.

Paths: ``stepped`` (vLLM's ``LLMEngine``, a request per row, stepped by a thread of ours: the
baseline) and, on the overhead model, ``null`` (the NULL ENGINE: no model; the server's own cost,
the pipeline's ceiling). Ratios: ``engine_overhead_{metric}_{model}_{path}{suffix}`` with metric
``engine_cpu_us``, ``server_cpu_us`` and ``rows_per_s`` (suffix: none at 50 tokens, ``_512``).

    uv run --extra cpu embedtext bench --only engine-overhead
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from embedtext.bench.corpus import BenchCorpus
from embedtext.bench.rounds import Workload
from embedtext.bench.variants import Variant, VariantComparison, run_variants

SUITE = "engine-overhead"
PREFIX = "engine_overhead"
# One bulk engine per server, nothing beside it: each path's cost per row alone.
ONE_ENGINE = ("--replicas", "1", "--interactive-replica", "off")
STEPPED = Variant("stepped", ("--engine-loop", "stepped"))
NULL = Variant("null", ("--engine", "null"))
# The overhead model's shape: compute negligible beside the engine's per-row work (head_dim 32,
# the least vLLM-CPU's attention takes).
OVERHEAD_MODEL = dict(layers=1, hidden=32, heads=1, max_tokens=512)
METRICS = {
    "engine_cpu_us": "engine_cpu_us_per_row",
    "server_cpu_us": "server_cpu_us_per_row",
    "rows_per_s": "rows_per_s",
}


@dataclass(frozen=True)
class OverheadModel:
    """A model the suite runs its paths on, and the rows per run at (50, 512) tokens."""

    label: str  # in case and ratio names
    source: str  # the server's --model SOURCE
    corpus_dir: Path
    rows: tuple[tuple[int, int], ...]  # (tokens, rows)
    variants: tuple[Variant, ...]


def comparison(model: OverheadModel) -> VariantComparison:
    return VariantComparison(SUITE, f"{PREFIX}_{model.label}", model.variants, flags=ONE_ENGINE)


def overhead_models(quick: bool, overhead_dir: Path, default_dir: Path) -> list[OverheadModel]:
    """The overhead model runs thousands of rows a second; the default model about a tenth of that."""
    scale = 1 if quick else 4
    return [
        OverheadModel(
            "overhead",
            f"overhead={overhead_dir}",
            overhead_dir,
            ((50, 4096 * scale), (512, 512 * scale)),
            (STEPPED, NULL),
        ),
        OverheadModel("default", "default", default_dir, ((50, 512 * scale), (512, 64 * scale)), (STEPPED,)),
    ]


def run_engine_overhead(
    models: Sequence[OverheadModel], *, rounds: int, args: Sequence[str] = (), progress=print
) -> list[dict]:
    cases: list[dict] = []
    for model in models:
        workloads = [Workload(tokens, rows) for tokens, rows in model.rows]
        cases += run_variants(
            comparison(model),
            [model.source],
            workloads,
            BenchCorpus(model.corpus_dir),
            rounds=rounds,
            args=args,
            progress=progress,
        )
    for case in cases:
        if case["suite"] == SUITE:
            progress(
                f"{SUITE}: {case['name']}: engine thread {case.get('engine_cpu_us_per_row')} us/row, "
                f"server {case.get('server_cpu_us_per_row')} us/row, {case['rows_per_s']:,.0f} rows/s"
            )
    return cases


def engine_overhead_ratios(cases: Sequence[dict]) -> dict[str, float]:
    """Each case's per-row figures under one key each (the median round's, as the case holds them).

    >>> case = {"suite": SUITE, "name": "engine_overhead_overhead_stepped_512tok", "tokens_per_row": 512,
    ...         "engine_cpu_us_per_row": 290.0, "server_cpu_us_per_row": 40.5, "rows_per_s": 3100.0}
    >>> engine_overhead_ratios([case])
    {'engine_overhead_engine_cpu_us_overhead_stepped_512': 290.0, \
'engine_overhead_server_cpu_us_overhead_stepped_512': 40.5, 'engine_overhead_rows_per_s_overhead_stepped_512': 3100.0}
    """
    ratios: dict[str, float] = {}
    for case in cases:
        if case["suite"] != SUITE:
            continue
        name = case["name"].removeprefix(f"{PREFIX}_").rsplit("_", 1)[0]  # {model}_{path}
        suffix = Workload(case["tokens_per_row"], 0).suffix
        for metric, field in METRICS.items():
            if case.get(field) is not None:
                ratios[f"{PREFIX}_{metric}_{name}{suffix}"] = case[field]
    return ratios
