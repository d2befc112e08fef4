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
