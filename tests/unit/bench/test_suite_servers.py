"""The servers a suite starts are the ones it says it compares: their flags, parsed as `embedtext
serve` parses them and resolved for the device, give the settings the suite's names claim."""

import dataclasses
import os

from embedtext.bench.mixed import MODE_NAMES, mode_variants
from embedtext.server.config.resolve import GPU_INTERACTIVE_SLO_MS, resolve


def _server(flags, monkeypatch, device="cpu"):
    from embedtext.server.cli import config_from_args

    for name in [n for n in os.environ if n.startswith("EMBEDTEXT_")]:  # the test session's own settings
        monkeypatch.delenv(name)
    config = config_from_args(["--model", "default", *flags])
    return config, resolve(config, device, flags=frozenset())


def _mode(mode, monkeypatch, slo_ms=None, device="cpu"):
    (variant,) = mode_variants([mode], slo_ms)
    return _server(variant.flags, monkeypatch, device)[1]


def test_the_mixed_suite_gives_its_paced_servers_the_gpu_target(monkeypatch):
    """On a CPU the paced servers keep their default target. On a GPU the classes server (shared
    stepped engines) and the interactive replica's hold 20 ms, and the unpaced one is the classes
    server without a target, the baseline on either device."""
    assert MODE_NAMES == ("interactive_replica", "classes", "unpaced")
    on_cpu = {mode: _mode(mode, monkeypatch) for mode in MODE_NAMES}
    assert on_cpu["classes"].interactive_slo_s == 0.25 and on_cpu["classes"].stepped
    assert on_cpu["unpaced"].interactive_slo_s is None and on_cpu["unpaced"].stepped
    # The CPU's defaults are the interactive replica's server.
    defaults = _server((), monkeypatch)[1]
    as_told = dataclasses.replace(
        defaults,
        config=dataclasses.replace(defaults.config, interactive_replica="on"),
        interactive_replica_reason="interactive_replica=on",
    )
    assert on_cpu["interactive_replica"] == as_told

    on_gpu = {mode: _mode(mode, monkeypatch, GPU_INTERACTIVE_SLO_MS, "cuda") for mode in MODE_NAMES}
    assert on_gpu["classes"].interactive_slo_s == GPU_INTERACTIVE_SLO_MS / 1000 and on_gpu["classes"].stepped
    assert on_gpu["interactive_replica"].interactive_replica and on_gpu["interactive_replica"].stepped
    assert on_gpu["unpaced"].interactive_slo_s is None and on_gpu["unpaced"].stepped
    # Every mode but interactive_replica runs queries and bulk work on the same engines, on either device.
    assert [m for m, r in on_gpu.items() if r.interactive_replica] == ["interactive_replica"]
    assert [m for m, r in on_cpu.items() if r.interactive_replica] == ["interactive_replica"]
    # Without the bench's target the server's GPU default is the same; its default engines are the replica's.
    assert _mode("classes", monkeypatch, device="cuda").interactive_slo_s == GPU_INTERACTIVE_SLO_MS / 1000
    assert _server((), monkeypatch, "cuda")[1].interactive_replica


def test_the_gpu_suite_runs_bulk_work_alone_unless_told_to_keep_the_default_target(monkeypatch):
    """Its servers hold no target by default (bulk work alone: the throughput a bulk-only server
    gets); --gpu-paced keeps the GPU's default target, as a server shared with queries runs."""
    from embedtext.bench.gpu_suite import gpu_server_args

    def on_gpu(**options):
        tag, args = gpu_server_args(8, 2, on_gpu=True, **options)
        config, resolved = _server(args, monkeypatch, "cuda")
        return tag, config, resolved

    tag, config, bulk = on_gpu()
    assert tag == "r8_p2" and bulk.stepped and bulk.interactive_slo_s is None and config.memory_fraction == 0.45
    assert not bulk.interactive_replica  # every engine runs the bulk work
    tag, config, paced = on_gpu(paced=True)
    assert tag == "r8_p2_paced" and paced.stepped and paced.interactive_slo_s == 0.02
    # The default (packed steps) and vLLM's requests, side by side in a headline run.
    assert on_gpu()[2].engine_loop == "packed"
    tag, config, packed = on_gpu(engine_loop="packed")
    assert tag == "r8_p2_packed" and packed.backend == "vllm-packed" and packed.interactive_slo_s is None
    tag, config, stepped = on_gpu(engine_loop="stepped")
    assert tag == "r8_p2_stepped" and stepped.backend == "vllm-stepped"
    # --gpu-set: a server setting under test, named in the cases
    assert config.tokenizer_threads == 2
    tag, config, threads = on_gpu(settings=("tokenizer_threads=4",))
    assert tag == "r8_p2_tokenizer_threads_4" and config.tokenizer_threads == 4 and threads.stepped


def test_the_engine_overhead_suite_runs_one_bulk_engine_per_path(monkeypatch):
    """Each path's cost per row alone: one engine (two for ``_2``), no interactive replica beside
    it; ``packed`` is vLLM's model on packed steps, ``stepped`` vLLM's LLMEngine stepped by the
    server, ``null`` no engine at all."""
    from pathlib import Path

    from embedtext.bench.engine_overhead import comparison, overhead_models
    from embedtext.bench.rounds import Workload

    families = {"xlm-roberta": Path("/models/xlm-roberta"), "qwen3": Path("/models/qwen3")}
    models = overhead_models(True, Path("/models/overhead"), Path("/models/default"), families=families)
    assert [m.label for m in models] == ["overhead", "default", "xlm_roberta", "qwen3"]
    assert models[-1].source == "qwen3=/models/qwen3" and models[-1].workloads == (Workload(50, 8192),)
    for model in models:
        suite = comparison(model)
        servers = {v.name: _server((*suite.flags, *v.flags), monkeypatch) for v in suite.variants}
        assert "stepped" in servers
        for name, (config, resolved) in servers.items():
            assert resolved.replicas == (2 if name.endswith("_2") else 1) and not resolved.interactive_replica
        assert servers["stepped"][1].backend == "vllm-stepped"
        assert servers["packed"][1].backend == "vllm-packed"
        if "null" in servers:
            assert servers["null"][1].backend == servers["null_2"][1].backend == "null"
            assert servers["packed_2"][1].backend == "vllm-packed"
