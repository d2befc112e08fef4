"""compile suite: each model family's packed engine with its model compiled (torch.compile) against
eager, servers side by side (bench/variants.py). It decides what ``enforce_eager=auto`` picks on a
CPU (server/host/cpu_features.py); each variant sets its own compile setting, not the run's.
"""

from __future__ import annotations

from pathlib import Path

from embedtext.bench.rounds import Workload
from embedtext.bench.variants import Variant, VariantComparison, VariantModel, model_comparison, run_per_model

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


def compile_model(label: str, source: str, directory: Path, max_tokens: int, rows: int) -> VariantModel:
    """One model's eager and compiled servers: ``rows`` rows of 50 tokens and a tenth as many of 512
    (or the model's most)."""
    workloads = (Workload(50, rows), Workload(min(LONG_TOKENS, max_tokens), rows // 10))
    return VariantModel(label, source, directory, workloads, (EAGER, COMPILED))


def compile_comparison(model: VariantModel) -> VariantComparison:
    """Compiled over eager rows/s for one model.

    >>> model = compile_model("gemma3", "gemma3=/m", Path("/m"), 512, 2048)
    >>> [r.key for r in compile_comparison(model).ratios], model.workloads[1].rows
    (['compile_rows_per_s_gemma3_compiled_vs_eager{suffix}'], 204)
    """
    return model_comparison(SUITE, PREFIX, model, [(COMPILED.name, EAGER.name, "compiled_vs_eager")], ONE_ENGINE)


def run_compile(models: list[VariantModel], *, rounds: int, progress=print) -> list[dict]:
    """Each model's two servers up side by side, its workloads timed on each in rotating rounds."""
    return run_per_model(models, compile_comparison, rounds=rounds, progress=progress)
