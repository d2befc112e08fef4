"""A CPU server's engines as resolve decides them: threads, one bulk engine per core, priority, memory."""

import pytest

from embedtext.server.config.resolve import resolve
from embedtext.server.config.settings import ServerConfig

ROOMY = 64 * 1024**3  # memory for any split the tests ask for


@pytest.mark.parametrize(
    ("settings", "device", "threads"),
    [
        ({}, "cpu", 0),  # torch's own count: fewer did not help on 2 cores
        ({"interactive_threads": 1}, "cpu", 1),  # as told
        ({"interactive_threads": 1}, "cuda", 0),  # a GPU computes the steps
        ({"interactive_threads": 1, "interactive_replica": "auto", "engine": "null"}, "cpu", 0),  # no replica
    ],
)
def test_interactive_threads_reach_the_interactive_engine_alone(settings, device, threads):
    config = ServerConfig(**settings)
    resolved = resolve(config, device, cores=8)
    assert resolved.interactive_threads == threads
    # The interactive replica's engine gets them, the bulk engines keep torch's own count.
    assert resolved.engine_settings(config, 0.2, interactive=True).compute_threads == (threads or None)
    assert resolved.engine_settings(config, 0.2).compute_threads is None
    if device == "cpu":
        assert _info(resolved).interactive_threads == threads  # what Info reports


def _info(resolved):
    """The Info RPC's model entry of a server built from ``resolved`` (its engines not started)."""
    import asyncio

    from embedtext.protocol import embedding_pb2 as pb
    from embedtext.server import app
    from embedtext.server.api.servicer import EmbeddingServicer
    from embedtext.server.metrics import ServerMetrics

    metrics = ServerMetrics()
    (runtime,) = app.build_runtimes(resolved, metrics)
    try:
        reply = asyncio.run(EmbeddingServicer([runtime], resolved.config, metrics).Info(pb.InfoRequest(), None))
    finally:
        runtime.tokenizers.close()
    return reply.models[0]


@pytest.mark.parametrize("flags", [frozenset({"avx512f", "avx512_bf16"}), frozenset({"avx2"})])
def test_info_reports_the_engines_as_resolve_chose_them(flags):
    resolved = resolve(ServerConfig(), "cpu", flags, cores=2, memory_bytes=ROOMY)
    model = _info(resolved)
    assert (model.dtype, model.engine_loop, model.enforce_eager) == (
        resolved.dtype.dtype,
        resolved.engine_loop,
        resolved.enforce_eager,
    )
    assert model.dtype == ("bfloat16" if "avx512_bf16" in flags else "float32")


@pytest.mark.parametrize(
    ("settings", "device", "threads"),
    [
        ({}, "cpu", 0),  # torch's own count
        ({"bulk_threads": 1}, "cpu", 1),  # as told
        ({"bulk_threads": 1, "interactive_replica": "off"}, "cpu", 1),  # shared engines are bulk engines too
        ({"bulk_threads": 1}, "cuda", 0),  # a GPU computes the steps
        ({"bulk_threads": 1, "engine": "null"}, "cpu", 0),  # no vLLM engine
    ],
)
def test_bulk_threads_reach_the_bulk_engines_alone(settings, device, threads):
    config = ServerConfig(**settings)
    resolved = resolve(config, device, cores=8)
    assert resolved.bulk_threads == threads
    assert resolved.engine_settings(config, 0.2).compute_threads == (threads or None)
    # The interactive replica's engine keeps its own count (--interactive-threads).
    assert resolved.engine_settings(config, 0.2, interactive=True).compute_threads is None


@pytest.mark.parametrize(
    ("settings", "device", "cores", "split"),
    [
        ({}, "cpu", 2, True),  # one engine per core, one thread each, at nice 10
        ({}, "cpu", 1, False),  # one core: one engine
        ({}, "cpu", 8, False),  # larger CPUs: not measured, one engine
        ({}, "cuda", 2, False),  # a GPU computes the steps
        ({"replicas": 1}, "cpu", 2, False),  # as told
        ({"bulk_threads": 2}, "cpu", 2, False),
        ({"interactive_replica": "off"}, "cpu", 2, False),  # shared engines run queries too
    ],
)
def test_a_small_cpu_runs_bulk_work_on_one_engine_per_core_at_a_lower_priority(settings, device, cores, split):
    """Unset, --replicas on a CPU of 2 cores beside an interactive replica: a bulk engine per core on
    one thread each, so none waits for another's thread while a query's step holds its core."""
    from embedtext.server import app
    from embedtext.server.metrics import ServerMetrics

    config = ServerConfig(**settings)
    resolved = resolve(config, device, cores=cores, memory_bytes=ROOMY)
    bulk = resolved.engine_settings(config, 0.2)
    assert not resolved.split_declined
    if split:
        assert (resolved.replicas, bulk.compute_threads, bulk.nice) == (cores, 1, 10)
        assert resolved.split_reason.startswith("auto")
        # The queries' engine keeps every core, at the server's priority.
        interactive = resolved.engine_settings(config, 0.2, interactive=True)
        assert (interactive.compute_threads, interactive.nice) == (None, 0)
    else:
        assert resolved.replicas == (config.replicas or 1) and not resolved.split_reason
        assert bulk.compute_threads == (settings.get("bulk_threads") if device == "cpu" else None)
        assert bulk.nice == 0
    if device == "cpu":
        (runtime,) = app.build_runtimes(resolved, ServerMetrics())
        bulk_replicas = [r for r in runtime.supervisor.replicas if not r.interactive_only]
        assert len(bulk_replicas) == resolved.replicas
        runtime.tokenizers.close()
    if split:
        told = resolve(ServerConfig(**settings, bulk_nice=0), device, cores=cores)
        assert told.bulk_nice == 0 and told.replicas == cores  # the priority as told, the split still


@pytest.mark.parametrize(
    ("settings", "device", "cores", "later"),
    [
        ({}, "cpu", 2, True),  # the split and the queries' engine start behind the first bulk engine
        ({}, "cpu", 8, True),  # the queries' engine
        ({"replicas": 3, "interactive_replica": "off"}, "cpu", 8, True),  # more bulk engines
        ({"replicas": 1, "interactive_replica": "off"}, "cpu", 8, False),  # one engine: nothing later
        ({}, "cuda", 2, False),  # each GPU engine checks free device memory before batches run
    ],
)
def test_a_cpu_server_is_ready_with_one_engine_and_starts_the_rest_behind_it(settings, device, cores, later):
    """The server runtime gets the choice: its supervisor starts the rest after ready."""
    from embedtext.server import app
    from embedtext.server.metrics import ServerMetrics

    config = ServerConfig(**settings)
    resolved = resolve(config, device, cores=cores, memory_bytes=ROOMY)
    assert resolved.rest_after_ready == later
    if device == "cpu":
        (runtime,) = app.build_runtimes(resolved, ServerMetrics())
        assert runtime.supervisor._rest_after_ready == later
        runtime.tokenizers.close()


def _engine_bytes(config: ServerConfig, model_dir) -> int:
    from embedtext.server.config.resolve import cpu_engine_bytes
    from embedtext.server.models.source import load_model_spec

    return cpu_engine_bytes(load_model_spec(str(model_dir)), config, resolve(config, "cpu").dtype.dtype)


def test_an_engine_counts_its_kv_cache_beside_its_weights(tiny_model_dir):
    """A decoder's engine allocates a KV cache of CPU_CACHE_STEPS steps: the estimate holds it."""
    from embedtext.server.config.resolve import cpu_engine_bytes
    from embedtext.server.engine.vllm_args import CPU_CACHE_STEPS
    from embedtext.server.host.memory import CPU_ENGINE_BYTES
    from embedtext.server.models.source import load_model_spec

    spec = load_model_spec(str(tiny_model_dir))
    assert spec.kv_values_per_token > 0
    config = ServerConfig(max_batch_tokens=4096)
    cache = CPU_CACHE_STEPS * 4096 * spec.kv_values_per_token * 4
    assert cpu_engine_bytes(spec, config, "float32") == CPU_ENGINE_BYTES + spec.weight_bytes + cache
    assert cpu_engine_bytes(spec, config, "bfloat16") == CPU_ENGINE_BYTES + spec.weight_bytes + cache // 2


def test_a_small_cpu_keeps_one_bulk_engine_where_the_split_would_not_fit_in_memory(tiny_model_dir, caplog):
    """Each engine takes CPU_ENGINE_BYTES, its weights and its KV cache: with less memory available than
    the split's engines need, the bulk work stays on one engine, and the start-up log says why."""
    import logging

    from embedtext.server import app
    from embedtext.server.metrics import ServerMetrics

    config = ServerConfig(models=(f"tiny={tiny_model_dir}",))
    need = 3 * _engine_bytes(config, tiny_model_dir)  # 2 bulk, 1 interactive
    assert resolve(config, "cpu", cores=2, memory_bytes=need).replicas == 2
    short = resolve(config, "cpu", cores=2, memory_bytes=need - 1)
    assert (short.replicas, short.bulk_threads, short.bulk_nice, short.split_reason) == (1, 0, 0, "")
    assert "3 engines would take about" in short.split_declined and "--replicas" in short.split_declined
    two_models = ServerConfig(models=(f"a={tiny_model_dir}", f"b={tiny_model_dir}"))
    assert resolve(two_models, "cpu", cores=2, memory_bytes=need).replicas == 1  # each model has its engines
    assert resolve(ServerConfig(models=config.models, replicas=2), "cpu", cores=2, memory_bytes=1).replicas == 2
    with caplog.at_level(logging.WARNING, logger="embedtext.server"):
        (runtime,) = app.build_runtimes(short, ServerMetrics())
    runtime.tokenizers.close()
    assert [r.interactive_only for r in runtime.supervisor.replicas] == [False, True]
    assert any(short.split_declined in record.getMessage() for record in caplog.records)


def test_a_cpu_without_memory_for_a_second_engine_runs_queries_on_the_bulk_engine(tiny_model_dir, caplog):
    """--interactive-replica auto on a CPU: off where the available memory would not hold both engines."""
    import logging

    from embedtext.server import app
    from embedtext.server.config.resolve import DECLINED
    from embedtext.server.metrics import ServerMetrics

    models = (f"tiny={tiny_model_dir}",)
    config = ServerConfig(models=models)
    two = 2 * _engine_bytes(config, tiny_model_dir)
    assert resolve(config, "cpu", cores=8, memory_bytes=two).interactive_replica
    short = resolve(config, "cpu", cores=2, memory_bytes=two - 1)
    assert not short.interactive_replica and short.interactive_replica_reason.startswith(DECLINED)
    assert "2 engines would take about" in short.interactive_replica_reason
    assert (short.replicas, short.split_declined, short.bulk_nice) == (1, "", 0)  # no split without it
    assert not resolve(ServerConfig(models=models, replicas=2), "cpu", cores=8, memory_bytes=two).interactive_replica
    assert resolve(ServerConfig(models=models, interactive_replica="on"), "cpu", memory_bytes=1).interactive_replica
    assert resolve(config, "cuda", memory_bytes=1).interactive_replica  # a GPU's engines hold device memory
    with caplog.at_level(logging.WARNING, logger="embedtext.server"):
        (runtime,) = app.build_runtimes(short, ServerMetrics())
    runtime.tokenizers.close()
    assert [r.interactive_only for r in runtime.supervisor.replicas] == [False]
    assert any(short.interactive_replica_reason in record.getMessage() for record in caplog.records)
    assert not short.memory_short  # the engine it keeps fits


def test_a_cpu_without_memory_for_its_engines_warns_at_start(tiny_model_dir, caplog):
    """Engines as told (or the one a CPU keeps) that would not fit: the server starts them, and its log says so."""
    import logging

    from embedtext.server import app
    from embedtext.server.metrics import ServerMetrics

    models = (f"tiny={tiny_model_dir}",)
    one = _engine_bytes(ServerConfig(models=models), tiny_model_dir)
    assert not resolve(ServerConfig(models=models), "cpu", cores=8, memory_bytes=one).memory_short
    short = resolve(ServerConfig(models=models), "cpu", cores=8, memory_bytes=one - 1)
    assert (short.replicas, short.interactive_replica) == (1, False)
    assert short.memory_short.startswith("1 engine would take about")
    told = resolve(ServerConfig(models=models, replicas=2, interactive_replica="on"), "cpu", memory_bytes=3 * one - 1)
    assert told.memory_short.startswith("3 engines would take about")
    assert not resolve(ServerConfig(models=models, replicas=2), "cuda", memory_bytes=1).memory_short
    with caplog.at_level(logging.WARNING, logger="embedtext.server"):
        (runtime,) = app.build_runtimes(short, ServerMetrics())
    runtime.tokenizers.close()
    assert any(short.memory_short in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize(
    ("settings", "device", "nice"),
    [
        ({}, "cpu", 0),  # one engine by default: it cost bulk work more than the queries gained on 2 cores
        ({"bulk_nice": 10}, "cpu", 10),  # as told: a query's step takes a core from the bulk engine at once
        ({"bulk_nice": 19}, "cpu", 19),
        ({"bulk_nice": 5}, "cuda", 5),
        ({"bulk_nice": 5, "engine": "null"}, "cpu", 0),  # auto: no interactive replica for the null engine
    ],
)
def test_bulk_engines_run_at_a_lower_priority_beside_an_interactive_replica_when_told(settings, device, nice):
    config = ServerConfig(**settings)
    resolved = resolve(config, device, cores=8)  # one bulk engine (a small CPU's split engines: above)
    assert resolved.bulk_nice == nice
    assert resolved.engine_settings(config, 0.2).nice == nice
    assert resolved.engine_settings(config, 0.2, interactive=True).nice == 0  # the queries' engine keeps it
