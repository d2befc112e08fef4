"""compile suite: each model family's packed engine with its model compiled (torch.compile) against
eager, servers side by side (bench/variants.py). It decides what ``enforce_eager=auto`` picks on a
CPU (server/host/cpu_features.py); each variant sets its own compile setting, not the run's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from embedtext.bench.corpus import BenchCorpus
from embedtext.bench.rounds import Ratio, Workload
from embedtext.bench.variants import Variant, VariantComparison, run_variants

SUITE = "compile"
PREFIX = "compile"
EAGER = Variant("eager", ("--set", "enforce_eager=on"))
COMPILED = Variant("compiled", ("--set", "enforce_eager=off"))
# One packed bulk engine per server, on the server's default threads, as a bulk scan runs.
ONE_ENGINE = ("--replicas", "1", "--set", "interactive_replica=off", "--set", "engine_loop=packed")
# The families at a real embedder's width (a third of Qwen3-Embedding-0.6B's layers' width and
# EmbeddingGemma's hidden 768): there the model's forward is the engine's CPU, as users run it.
COMPILE_FAMILY_SHAPE = dict(layers=4, hidden=768, heads=12, max_tokens=512)
LONG_TOKENS = 512


def compile_comparison(label: str) -> VariantComparison:
    """Compiled over eager rows/s for one model (``label``: its name in case and ratio names).

    >>> [r.key for r in compile_comparison("gemma3").ratios]
    ['compile_rows_per_s_gemma3_compiled_vs_eager{suffix}']
    """
    ratio = Ratio(f"{PREFIX}_rows_per_s_{label}_compiled_vs_eager{{suffix}}", COMPILED.name, EAGER.name)
    return VariantComparison(SUITE, f"{PREFIX}_{label}", (EAGER, COMPILED), ratios=(ratio,), flags=ONE_ENGINE)


@dataclass(frozen=True)
class CompileModel:
    label: str  # in case and ratio names
    source: str  # the server's --model SOURCE
    directory: Path
    max_tokens: int


def run_compile(models: Sequence[CompileModel], rows: int, *, rounds: int, progress=print) -> list[dict]:
    """Each model's two servers up side by side; ``rows`` rows of 50 tokens and a tenth as many of
    512 (or the model's most) timed on each in rotating rounds."""
    cases: list[dict] = []
    for model in models:
        workloads = [Workload(50, rows), Workload(min(LONG_TOKENS, model.max_tokens), rows // 10)]
        options = dict(rounds=rounds, progress=progress)
        comparison = compile_comparison(model.label)
        cases += run_variants(comparison, [model.source], workloads, BenchCorpus(model.directory), **options)
    return cases
