"""The host suites: each compares the server with one host-dependent setting on and off, as data.

What they decide depends on the machine, so they are worth running on a new one. Every suite is
a ``VariantComparison`` run by bench/variants.py: the variants' servers up side by side, every
workload timed on each in rotating rounds, and its ratios declared (numerator / denominator, on
one metric). Neither is in the default suites:

  allocator          server/host/allocator.py: engines on glibc malloc (``EMBEDTEXT_TCMALLOC=off``)
                     vs tcmalloc, on the scaling suite's Parquet query at its sizes and on
                     512-token rows. Ratios ``allocator_rows_per_s_tcmalloc_vs_glibc_{size}`` and
                     ``allocator_{allocator}_server_rss_{largest}_vs_{middle}`` (memory growth).
                     Needs a tcmalloc on the system; without one the suite says so.
  compile            vLLM's compiled model (``enforce_eager=off``) vs eager (``on``, which starts
                     seconds sooner: --only startup), on the default model, per dtype the CPU
                     runs well (float32; bfloat16 where it has bfloat16 instructions): the
                     evidence ``enforce_eager=auto`` goes by. Ratios
                     ``compile_rows_per_s_{dtype}_{T}tok`` (compiled over eager).

    uv run --extra cpu embedtext bench --only compile
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from embedtext.bench.corpus import BenchCorpus
from embedtext.bench.plan import BenchPlan, rows_label
from embedtext.bench.rounds import Ratio, Workload
from embedtext.bench.variants import Variant, VariantComparison, run_variants

LONG_TOKENS = 512


def allocator(sizes: Sequence[Workload]) -> VariantComparison:
    """``sizes``: the Parquet workloads, smallest first (memory growth: the largest vs the next)."""
    growth = ()
    if len(sizes) >= 2:
        big, mid = sizes[-1], sizes[-2]
        growth = tuple(
            Ratio(
                f"allocator_{name}_server_rss_{rows_label(big.rows)}_vs_{rows_label(mid.rows)}",
                name,
                name,
                metric="server_rss_mb",
                across=(big.label, mid.label),
            )
            for name in ("glibc", "tcmalloc")
        )
    return VariantComparison(
        "allocator",
        "allocator",
        (Variant("tcmalloc"), Variant("glibc", env=(("EMBEDTEXT_TCMALLOC", "off"),))),
        ratios=(Ratio("allocator_rows_per_s_tcmalloc_vs_glibc_{workload}", "tcmalloc", "glibc"), *growth),
    )


def compile_modes(dtype: str) -> VariantComparison:
    return VariantComparison(
        "compile",
        f"compile_{dtype}",
        (Variant("compiled", ("--set", "enforce_eager=off")), Variant("eager", ("--set", "enforce_eager=on"))),
        ratios=(Ratio(f"compile_rows_per_s_{dtype}_{{workload}}", "compiled", "eager"),),
        flags=("--dtype", dtype),
    )


def compile_dtypes() -> tuple[str, ...]:
    """float32, and bfloat16 where ``--dtype auto`` picks it on this CPU."""
    from embedtext.server.config.resolve import resolve
    from embedtext.server.config.settings import ServerConfig

    auto = resolve(ServerConfig(engine_loop="packed"), "cpu", memory_bytes=0).dtype.dtype
    return ("float32", "bfloat16") if auto == "bfloat16" else ("float32",)


def run_evidence(suite: str, plan: BenchPlan, model_dir: Path, progress=print) -> list[dict]:
    """One evidence suite at the plan's sizes (rounds: 2 quick, 3 full; allocator 2, its scans are long)."""
    corpus = BenchCorpus(model_dir)
    args = plan.engine_flags
    rounds = 2 if plan.quick else 3
    models = [f"tiny={model_dir}"]
    cases: list[dict] = []
    if suite == "allocator":
        from embedtext.server.host.tuning import host_tuning

        if "LD_PRELOAD" not in host_tuning("cpu").env:
            progress("allocator: skipped, nothing to compare (the engines get no tcmalloc here)")
            return []
        tokens = plan.scaling_tokens
        sizes = [
            Workload(tokens, rows, kind="parquet", name=f"{rows_label(rows)}_rows_{tokens}tok")
            for rows in plan.allocator_rows
        ]
        workloads = [*sizes, Workload(LONG_TOKENS, dict(plan.cpu_work)[LONG_TOKENS])]
        cases += run_variants(
            allocator(sizes),
            models,
            workloads,
            corpus,
            rounds=2,
            args=args,
            workdir=plan.workdir,
            progress=progress,
        )
    elif suite == "compile":
        from embedtext.server.models.source import load_model_spec

        # The default model (a real one: compiling pays off on its kernels, not the tiny model's),
        # compiled even in quick runs: that is what is compared.
        corpus = BenchCorpus(load_model_spec("default").path)
        workloads = [Workload(tokens, rows) for tokens, rows in plan.compile_work]
        for dtype in compile_dtypes():
            cases += run_variants(
                compile_modes(dtype), ["default"], workloads, corpus, rounds=rounds, progress=progress
            )
    else:
        raise ValueError(f"no evidence suite {suite!r}")
    return cases
