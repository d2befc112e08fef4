"""Engine overhead: the host CPU each engine path spends per row, besides the model's own compute.

Each engine path is a server variant (bench/variants.py), up side by side, timed on DuckDB scans in
rotating rounds, as the server feeds its engines: one bulk engine per server, stepping unpaced as a
bulk engine beside the interactive replica does, on one compute thread as a 2-core host's bulk
engines do (``--replicas 1 --interactive-replica off --interactive-slo-ms 0 --bulk-threads 1``),
batches as the server's batcher builds them. Per case, on one line, a row's whole host budget:

  engine_cpu_us_per_row   the thread that steps the engine (its own CPU time, not wall time: in
                          the replica's worker process, the thread named ENGINE_THREAD_NAME)
  server_cpu_us_per_row   the server process: gRPC, tokenizing, batching and dispatch
  rows_per_s

Two models: ``overhead``, a generated BERT of little compute (1 layer, hidden 32), where a path's
per-row work weighs most beside the model; and the default model. Rows of 50 and 512 tokens (the
default model: 256, the most it takes).

The engine thread also computes the model; ``{model}_model`` cases time vLLM's model alone on packed
steps of the server's step size, on one thread (a child process set up as an engine's worker): what
the model itself takes of a path's ``engine_cpu_us_per_row``. A guide, not a floor to subtract: it
runs on an otherwise idle host, where the paths' engines share theirs with the server and DuckDB.

What it settled: packed steps are the CPU's engine loop (server/config/resolve.py): on the overhead model
they run several times the stepped path's rows/s at a fraction of its engine CPU a row, and on the
default model, whose compute fills the cores, as many rows/s.

Paths: ``packed`` (vLLM's model on each step's rows packed end to end: server/engine/vllm_packed.py),
``stepped`` (vLLM's ``LLMEngine``, a request per row, stepped by a thread of ours: the baseline)
and, on the overhead model, ``null`` (the NULL ENGINE: no model; the server's own cost, the
pipeline's ceiling), and ``packed_2`` and ``null_2``, the same with two replicas (does the host
side scale with engines: rows/s, and CPU a row summed over both engine threads). Ratios:
``engine_overhead_{metric}_{model}_{path}{suffix}`` with metric
``engine_cpu_us``, ``server_cpu_us`` and ``rows_per_s`` (suffix: none at 50 tokens, ``_512``), and
``engine_overhead_rows_per_s_{model}_packed_vs_stepped{suffix}`` and ``..._{path}_2_replicas_vs_1{suffix}``
(the median of the rounds' ratios).

    uv run --extra cpu embedtext bench --only engine-overhead
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from embedtext.bench.corpus import BenchCorpus
from embedtext.bench.measure import make_case
from embedtext.bench.rounds import Ratio, Workload
from embedtext.bench.variants import Variant, VariantComparison, run_variants

SUITE = "engine-overhead"
LONG_TOKENS = 512
PREFIX = "engine_overhead"
# One bulk engine per server, nothing beside it: each path's cost per row alone.
# On one compute thread, the engine thread's own: its CPU is then the model's compute and the path's
# work, without OpenMP's waits for a second thread that the other processes on a small host delay
# (a 2-core host's default bulk engines run so).
ENGINE_THREADS = 1
ONE_ENGINE = (
    "--replicas",
    "1",
    "--set",
    "interactive_replica=off",
    "--interactive-slo-ms",
    "0",
    "--set",
    f"bulk_threads={ENGINE_THREADS}",
)
STEPPED = Variant("stepped", ("--set", "engine_loop=stepped"))
PACKED = Variant("packed", ("--set", "engine_loop=packed"))
# Two replicas: whether the host side scales with engines (the later --replicas wins).
PACKED_2 = Variant("packed_2", ("--set", "engine_loop=packed", "--replicas", "2"))
NULL_2 = Variant("null_2", ("--set", "engine=null", "--replicas", "2"))
NULL = Variant("null", ("--set", "engine=null"))
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
    names = {v.name for v in model.variants}
    pairs = [("packed", "stepped", "packed_vs_stepped")]
    pairs += [(f"{path}_2", path, f"{path}_2_replicas_vs_1") for path in ("packed", "null")]
    ratios = tuple(
        Ratio(f"{PREFIX}_rows_per_s_{model.label}_{key}{{suffix}}", numerator, denominator)
        for numerator, denominator, key in pairs
        if {numerator, denominator} <= names
    )
    return VariantComparison(SUITE, f"{PREFIX}_{model.label}", model.variants, ratios=ratios, flags=ONE_ENGINE)


def overhead_models(
    quick: bool, overhead_dir: Path, default_dir: Path, default_max_tokens: int = 512
) -> list[OverheadModel]:
    """The overhead model runs thousands of rows a second; the default model about a tenth of that.
    Long rows are 512 tokens, or as many as the model takes (all-MiniLM-L6-v2: 256)."""
    scale = 1 if quick else 4
    long = min(LONG_TOKENS, default_max_tokens)
    return [
        OverheadModel(
            "overhead",
            f"overhead={overhead_dir}",
            overhead_dir,
            ((50, 4096 * scale), (LONG_TOKENS, 512 * scale)),
            (PACKED, STEPPED, NULL, PACKED_2, NULL_2),
        ),
        OverheadModel("default", "default", default_dir, ((50, 512 * scale), (long, 64 * scale)), (PACKED, STEPPED)),
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
        for workload in workloads:
            progress(f"{SUITE}: {model.label}, {workload.label}: vLLM's model alone on packed steps")
            cases.append(model_floor_case(model, int(workload.tokens), args))
    for case in cases:
        if case["suite"] == SUITE:
            progress(
                f"{SUITE}: {case['name']}: engine thread {case.get('engine_cpu_us_per_row')} us/row, "
                f"server {case.get('server_cpu_us_per_row')} us/row, {case['rows_per_s']:,.0f} rows/s"
            )
    return cases


def model_floor_case(model: OverheadModel, tokens: int, args: Sequence[str]) -> dict:
    """The model's own cost on a step's rows: vLLM's model called on packed steps of the server's
    step size, timed on the calling thread (``engine_cpu_us_per_row``), in a child process set up as
    an engine's worker, alone on the host (a guide to the model's part of a path's engine CPU)."""
    eager = "enforce_eager=on" in args
    command = [sys.executable, "-m", "embedtext.bench.engine_overhead", model.source, str(tokens), str(eager)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=_engine_env())
    lines = [line for line in done.stdout.splitlines() if line.startswith("FLOOR ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the model floor of {model.label} failed:\n{done.stderr[-3000:]}")
    floor = json.loads(lines[-1][len("FLOOR ") :])
    return make_case(
        f"{PREFIX}_{model.label}_model_{tokens}tok",
        SUITE,
        rows=floor["rows"],
        seconds=floor["seconds"],
        tokens_per_row=tokens,
        engine_cpu_us_per_row=floor["cpu_us_per_row"],
        rows_per_step=floor["rows_per_step"],
        path="vLLM's model alone, on packed steps of the server's step size, on an otherwise idle host",
    )


def _engine_env() -> dict[str, str]:
    import os

    from embedtext.server.host.tuning import host_tuning

    threads = str(ENGINE_THREADS)  # as the servers' engines compute (--bulk-threads)
    return {**os.environ, **host_tuning("cpu").env, "OMP_NUM_THREADS": threads, "HF_HUB_OFFLINE": "1"}


def _measure_floor(source: str, tokens: int, eager: bool, repeats: int = 5, repeat_s: float = 1.0) -> dict:
    """In this process: an engine as a server's bulk engine is built, its model timed on packed steps,
    ``repeats`` times as many steps as take about ``repeat_s``."""
    import statistics
    import time

    import numpy as np

    from embedtext.server.config.resolve import resolve
    from embedtext.server.config.settings import ServerConfig
    from embedtext.server.engine.vllm_args import max_step_tokens
    from embedtext.server.engine.vllm_packed import PackedModel
    from embedtext.server.engine.vllm_stepped import build_inprocess_engine
    from embedtext.server.models.source import load_model_spec, parse_model_arg

    config = ServerConfig(
        models=(source,), replicas=1, interactive_replica="off", enforce_eager="on" if eager else "off"
    )
    resolved = resolve(config)
    settings = resolved.engine_settings(config, resolved.memory_fraction)
    name, path = parse_model_arg(source)
    spec = load_model_spec(path, name)
    packed = PackedModel(build_inprocess_engine(spec, settings))
    rows = max(1, max_step_tokens(spec, settings) // tokens)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, packed.vocab_size, size=rows * tokens).astype(np.int32)
    lengths = np.full(rows, tokens, dtype=np.int64)
    packed.embed(ids, lengths)  # the first call allocates
    t0 = time.perf_counter()
    packed.embed(ids, lengths)
    steps = max(1, round(repeat_s / (time.perf_counter() - t0)))
    cpu, wall = [], []
    for _ in range(repeats):
        c0, t0 = time.thread_time(), time.perf_counter()
        for _ in range(steps):
            packed.embed(ids, lengths)
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - t0)
    return {
        "rows": rows * steps,
        "seconds": statistics.median(wall),
        "cpu_us_per_row": round(1e6 * statistics.median(cpu) / (rows * steps), 1),
        "rows_per_step": rows,
    }


def engine_overhead_ratios(cases: Sequence[dict]) -> dict[str, float]:
    """Each case's per-row figures under one key each (the median round's, as the case holds them).

    >>> case = {"suite": SUITE, "name": "engine_overhead_overhead_stepped_512tok", "tokens_per_row": 512,
    ...         "engine_cpu_us_per_row": 290.0, "server_cpu_us_per_row": 40.5, "rows_per_s": 3100.0}
    >>> engine_overhead_ratios([case])["engine_overhead_engine_cpu_us_overhead_stepped_512"]
    290.0
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


if __name__ == "__main__":  # the model floor's child: SOURCE TOKENS EAGER
    from embedtext.server.engine.vllm_stepped import use_inprocess_engine

    use_inprocess_engine()
    print("FLOOR " + json.dumps(_measure_floor(sys.argv[1], int(sys.argv[2]), sys.argv[3] == "True")), flush=True)
