"""The vLLM engine arguments of a replica: one place for what every vLLM engine here is built with.

The stepped engines (``vllm_stepped``: ``EngineArgs``) and the in-process baseline of the
benchmarks (bench/inprocess.py: ``LLM``) take these keywords, so a comparison between them differs
only in what it names.

>>> from pathlib import Path
>>> from embedtext.server.engine.base import EngineSettings
>>> from embedtext.server.models.source import ModelSpec
>>> spec = ModelSpec(name="m", path=Path("/models/m"), dim=384, max_tokens=256, pooling="mean", normalize=True)
>>> settings = EngineSettings(memory_fraction=0.2, max_batch_tokens=128, max_num_seqs=1024, device="cpu")
>>> args = engine_arguments(spec, settings)
>>> args["max_num_batched_tokens"], args["max_num_seqs"], args["scheduling_policy"]  # a step holds the longest row
(256, 256, 'fcfs')
>>> "compilation_config" in args
False
>>> gpu = EngineSettings(memory_fraction=0.2, max_batch_tokens=65536, max_num_seqs=1024, device="cuda",
...                      step_graph_tokens=(65536, 16384, 131072))
>>> engine_arguments(spec, gpu)["compilation_config"]  # sizes above a step's tokens would be dropped
{'cudagraph_mode': 'PIECEWISE', 'cudagraph_capture_sizes': [16384, 65536]}
"""

from __future__ import annotations

from typing import Any

from embedtext.server.engine.base import EngineSettings
from embedtext.server.models.source import ModelSpec

# A CPU engine's KV cache holds this many steps' tokens. A decoder's packed step stages its rows
# there (server/engine/attention_kinds.py; a step that needs more blocks runs as several forwards),
# and vLLM's request path a step's. vLLM-CPU's own sizing, a share of the host's memory less what
# the process holds, comes out below zero for each of several engines on a small host.
CPU_CACHE_STEPS = 2
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def cpu_kv_cache_bytes(spec: ModelSpec, step_tokens: int, dtype: str) -> int:
    """The KV cache a CPU engine is given: ``CPU_CACHE_STEPS`` steps of ``step_tokens`` (at least the
    model's longest row) of the model's keys and values (an encoder-only model's engine allocates
    none, whatever it is given; config.json does not say which a model is, so the server's memory
    estimate, server/config/resolve.py, counts it for every model).

    >>> from pathlib import Path
    >>> spec = ModelSpec(name="m", path=Path("m"), dim=128, max_tokens=128, pooling="last", normalize=True,
    ...                  kv_values_per_token=256)
    >>> cpu_kv_cache_bytes(spec, 1024, "bfloat16"), cpu_kv_cache_bytes(spec, 64, "float32")
    (1048576, 262144)
    """
    return CPU_CACHE_STEPS * max(step_tokens, spec.max_tokens) * spec.kv_values_per_token * _DTYPE_BYTES.get(dtype, 4)


def max_step_tokens(spec: ModelSpec, settings: EngineSettings) -> int:
    """The most tokens one engine step holds: a batch's, and never less than the longest row."""
    return max(settings.max_batch_tokens, spec.max_tokens)


def engine_arguments(spec: ModelSpec, settings: EngineSettings) -> dict[str, Any]:
    """Keywords for vLLM's ``EngineArgs`` or ``LLM``. vLLM schedules first come, first served: the
    step plan (server/engine/step_plan.py) chooses each step's rows, queries first."""
    step_tokens = max_step_tokens(spec, settings)
    extra: dict[str, Any] = {}
    if settings.step_graph_tokens and settings.device == "cuda" and not settings.enforce_eager:
        sizes = sorted(n for n in set(settings.step_graph_tokens) if n <= step_tokens)
        extra["compilation_config"] = {"cudagraph_mode": "PIECEWISE", "cudagraph_capture_sizes": sizes}
    if settings.device == "cpu" and spec.kv_values_per_token:
        extra["kv_cache_memory_bytes"] = cpu_kv_cache_bytes(spec, settings.max_batch_tokens, settings.dtype)
    return dict(
        model=str(spec.path),
        runner="pooling",
        convert="embed",
        gpu_memory_utilization=settings.memory_fraction,
        max_model_len=spec.max_tokens,
        max_num_batched_tokens=step_tokens,
        # vLLM refuses more rows a step than tokens a step (every row has one token at least).
        max_num_seqs=min(settings.max_num_seqs, step_tokens),
        dtype=settings.dtype,
        enforce_eager=settings.enforce_eager,
        disable_log_stats=True,
        enable_prefix_caching=False,
        scheduling_policy="fcfs",
        use_tqdm_on_load=False,  # no progress bar in the server's log (server/host/quiet.py)
        **extra,
    )


def compilation_note(vllm_config: Any) -> str:
    """How the built engine runs its model, read from the config vLLM settled on (not the one asked for).

    A log line only: a vLLM whose config reads otherwise gets a note that says so, not a failed start.
    """
    compilation = getattr(vllm_config, "compilation_config", None)
    mode = getattr(compilation, "mode", None)  # vLLM before 0.11 calls it level, an int
    mode = getattr(compilation, "level", None) if mode is None else mode
    if mode is None:
        return "vLLM's config does not say how it runs the model"
    name = getattr(mode, "name", str(mode))
    if getattr(getattr(vllm_config, "model_config", None), "enforce_eager", False) or name in ("NONE", "0"):
        return f"the model runs eagerly (vLLM compilation mode {name})"
    return f"the model is compiled (vLLM compilation mode {name})"
