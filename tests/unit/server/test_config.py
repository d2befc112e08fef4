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
