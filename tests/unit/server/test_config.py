import pytest

from embedtext.server.config import ServerConfig


def test_loopback_and_uds_are_allowed():
    assert ServerConfig().address == "127.0.0.1:50051"
    assert ServerConfig(host="::1").address == "[::1]:50051"
    assert ServerConfig(uds="/tmp/x.sock", host="0.0.0.0").address == "unix:/tmp/x.sock"


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "example.com"])
def test_wider_binds_are_refused_without_tls(host):
    with pytest.raises(ValueError, match="loopback"):
        ServerConfig(host=host)


def test_bounds_must_be_positive():
    with pytest.raises(ValueError, match="max-queued-rows"):
        ServerConfig(max_queued_rows=0)


@pytest.mark.parametrize(
    ("setting", "device", "replicas", "wanted"),
    [
        ("auto", "cuda", 8, True),  # one event loop would cap the GPU
        ("auto", "cuda", 1, False),
        ("auto", "cpu", 2, False),  # on a small CPU the extra process takes cores from the model
        ("on", "cpu", 1, True),
        ("off", "cuda", 8, False),
    ],
)
def test_replica_processes_auto_means_several_replicas_on_a_gpu(setting, device, replicas, wanted):
    from embedtext.server.app import replica_processes_wanted

    config = ServerConfig(replica_processes=setting, replicas=replicas)
    assert replica_processes_wanted(config, device) is wanted


def test_replica_processes_takes_auto_on_or_off():
    with pytest.raises(ValueError, match="auto, on or off"):
        ServerConfig(replica_processes="yes")


@pytest.mark.parametrize(
    "setting, device, engine, stepped",
    [
        ("auto", "cpu", "vllm", True),  # one vLLM import at start-up, steps paced by the server
        ("auto", "cuda", "vllm", False),  # AsyncLLM overlaps the server's work with the GPU's
        ("stepped", "cuda", "vllm", True),
        ("async", "cpu", "vllm", False),
        ("auto", "cpu", "null", False),  # the null engine has no steps
    ],
)
def test_engine_loop_auto_steps_the_engine_on_a_cpu(setting, device, engine, stepped):
    from embedtext.server.app import engine_loop_stepped

    assert engine_loop_stepped(ServerConfig(engine_loop=setting, engine=engine), device) is stepped


def test_a_stepped_engine_paces_its_steps_and_the_server_its_batches_no_more(monkeypatch):
    from embedtext.server import app
    from embedtext.server.metrics import ServerMetrics

    monkeypatch.setattr(app, "engine_device", lambda config: "cpu")
    stepped, = app.build_runtimes(ServerConfig(engine_loop="stepped"), ServerMetrics())
    assert stepped.pacer is None and stepped.interactive_slo_s == 0.25 and stepped.engine_loop == "stepped"
    backend = stepped.supervisor._factory(0)
    assert backend.engine == "vllm-stepped" and backend.settings.interactive_slo_s == 0.25
    paced, = app.build_runtimes(ServerConfig(engine_loop="async"), ServerMetrics())
    assert paced.pacer is not None and paced.supervisor._factory(0).settings.interactive_slo_s is None
    for runtime in (stepped, paced):
        runtime.tokenizers.close()


def test_engine_loop_takes_auto_async_or_stepped():
    with pytest.raises(ValueError, match="auto, async or stepped"):
        ServerConfig(engine_loop="own")
