import pytest

from embedtext.connectors.endpoints import Endpoint, EndpointSet, normalize_targets


def test_target_forms(tmp_path):
    sock = tmp_path / "s.sock"
    sock.write_text("")
    assert normalize_targets(None) == ["127.0.0.1:50051"]
    assert normalize_targets("a:1,b:2") == ["a:1", "b:2"]
    assert normalize_targets(["unix:/x.sock", str(sock)]) == ["unix:/x.sock", f"unix:{sock}"]
    with pytest.raises(ValueError, match="not a URL"):
        normalize_targets("http://x:1")


def test_lease_spreads_by_rows_and_returns_to_zero():
    eps = EndpointSet([Endpoint("a", None, None, None, None), Endpoint("b", None, None, None, None)])
    with eps.lease(100) as first, eps.lease(10) as second, eps.lease(5) as third:
        assert first.target != second.target and third is second
    with pytest.raises(RuntimeError):
        with eps.lease(7):
            raise RuntimeError
    assert eps.inflight_rows == 0


def test_avoid_picks_another_endpoint():
    a, b = Endpoint("a", None, None, None, None), Endpoint("b", None, None, None, None)
    eps = EndpointSet([a, b])
    with eps.lease(1, avoid=[a]) as got:
        assert got is b
    with eps.lease(1, avoid=[a, b]) as got:
        assert got in (a, b)
