"""Server variants side by side: the same model served with different flags, each variant a path of
the rounds runner, all up at once. A suite that compares server settings is data: a
``VariantComparison`` and its workloads."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import duckdb

import embedtext
from embedtext.bench.corpus import BenchCorpus
from embedtext.bench.queries import load_docs, scan_measure
from embedtext.bench.rounds import Ratio, RoundsPath, Workload, run_rounds
from embedtext.bench.servers import embedtext_server


@dataclass(frozen=True)
class Variant:
    name: str
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class VariantComparison:
    suite: str
    prefix: str  # case names: {prefix}_{variant}_{workload}
    variants: tuple[Variant, ...]
    ratios: tuple[Ratio, ...] = ()
    flags: tuple[str, ...] = ()  # every variant's


@dataclass(frozen=True)
class VariantModel:
    """A model a suite compares its variants on, one model after another (``run_per_model``)."""

    label: str  # in case and ratio names
    source: str  # the server's --model SOURCE
    corpus_dir: Path
    workloads: tuple[Workload, ...]
    variants: tuple[Variant, ...]


def model_comparison(
    suite: str, prefix: str, model: VariantModel, pairs: Sequence[tuple[str, str, str]], flags: tuple[str, ...]
) -> VariantComparison:
    """``model``'s variants under ``flags``, with a rows/s ratio for each (numerator, denominator, key)
    of ``pairs`` whose two variants it runs.

    >>> model = VariantModel("gemma3", "gemma3=/m", Path("/m"), (), (Variant("eager"), Variant("compiled")))
    >>> [r.key for r in model_comparison("s", "p", model, [("compiled", "eager", "c_vs_e")], ()).ratios]
    ['p_rows_per_s_gemma3_c_vs_e{suffix}']
    """
    names = {v.name for v in model.variants}
    ratios = tuple(
        Ratio(f"{prefix}_rows_per_s_{model.label}_{key}{{suffix}}", numerator, denominator)
        for numerator, denominator, key in pairs
        if {numerator, denominator} <= names
    )
    return VariantComparison(suite, f"{prefix}_{model.label}", model.variants, ratios=ratios, flags=flags)


def run_per_model(
    models: Sequence[VariantModel],
    comparison: Callable[[VariantModel], VariantComparison],
    *,
    rounds: int,
    args: Sequence[str] = (),
    progress=print,
) -> list[dict]:
    """Each model's variants up side by side and timed on its workloads (``run_variants``), one model
    after another: only one model's servers hold the machine at a time."""
    options = dict(rounds=rounds, args=args, progress=progress)
    cases: list[dict] = []
    for model in models:
        corpus = BenchCorpus(model.corpus_dir)
        cases += run_variants(comparison(model), [model.source], model.workloads, corpus, **options)
    return cases


def run_variants(
    comparison: VariantComparison,
    models: Sequence[str],
    workloads: Sequence[Workload],
    corpus: BenchCorpus | None = None,
    *,
    rounds: int,
    args: Sequence[str] = (),
    measure: Callable[[Variant, object], Callable[[Workload, bool], dict]] | None = None,
    progress=print,
    **rounds_options,
) -> list[dict]:
    """Every variant's server up, each workload timed on each in rotating rounds; ``measure``: how a
    variant runs a workload (default: DuckDB scans of ``corpus``'s rows)."""
    names = ", ".join(v.name for v in comparison.variants)
    progress(f"{comparison.suite}: servers side by side ({names}), {[w.label for w in workloads]}, {rounds} rounds")
    with ExitStack() as stack:
        paths = []
        connections = []
        for variant in comparison.variants:
            flags = [*args, *comparison.flags, *variant.flags]
            server = stack.enter_context(embedtext_server(list(models), args=flags))
            if measure is None:
                con = stack.enter_context(duckdb.connect())
                embedtext.register(con, server.target)
                connections.append(con)
                timed = _scan(server, con, comparison.suite)
            else:
                timed = measure(variant, server)
            description = " ".join([*comparison.flags, *variant.flags]) or "defaults"
            paths.append(RoundsPath(variant.name, f"{comparison.prefix}_{variant.name}", description, timed))

        def load(workload: Workload) -> None:
            rows = corpus.texts(workload.rows, workload.tokens) if connections else []
            for con in connections:
                load_docs(con, rows)

        options = dict(suite=comparison.suite, rounds=rounds, ratios=comparison.ratios, progress=progress)
        return run_rounds(paths, workloads, load=load, **options, **rounds_options)


def _scan(server, con: duckdb.DuckDBPyConnection, suite: str):
    def measure(workload: Workload, warmup: bool) -> dict:
        run = scan_measure(con, suite, "embed_text", server.pid, [server.target])(workload, warmup)
        cpu = run.get("cpu_s_per_run") or {}
        engines = sum(seconds for name, seconds in cpu.items() if name.startswith("server/"))
        run["engine_cpu_us_per_row"] = round(1e6 * engines / workload.rows, 1) if engines else None
        # The engines' CPU besides the model's forward: their path's own (requests, steps, pooling).
        model = run.get("model_cpu_us_per_row")
        if run["engine_cpu_us_per_row"] is not None and model is not None:
            run["engine_path_cpu_us_per_row"] = round(run["engine_cpu_us_per_row"] - model, 1)
        return run

    return measure
