"""The vLLM engine arguments each replica is built with (server/engine/vllm_args.py)."""

from pathlib import Path

from embedtext.server.engine.base import EngineSettings
from embedtext.server.engine.vllm_args import CPU_CACHE_STEPS, engine_arguments
from embedtext.server.models.source import ModelSpec


def _spec(kv_values_per_token: int) -> ModelSpec:
    return ModelSpec(
        name="m",
        path=Path("m"),
        dim=128,
        max_tokens=128,
        pooling="last",
        normalize=True,
        kv_values_per_token=kv_values_per_token,
    )


def _settings(device: str) -> EngineSettings:
    return EngineSettings(memory_fraction=0.2, max_batch_tokens=1024, max_num_seqs=64, device=device, dtype="float32")


def test_a_cpu_engine_gets_a_kv_cache_of_two_steps():
    """vLLM-CPU's own sizing (a share of the host's memory less what the process holds) comes out below
    zero for each of three engines on a 24 GiB host: a decoder could not start on the defaults."""
    args = engine_arguments(_spec(256), _settings("cpu"))
    assert args["kv_cache_memory_bytes"] == CPU_CACHE_STEPS * 1024 * 256 * 4


def test_a_gpu_engine_sizes_its_cache_by_its_memory_share():
    args = engine_arguments(_spec(256), _settings("cuda"))
    assert "kv_cache_memory_bytes" not in args and args["gpu_memory_utilization"] == 0.2
