"""Security on a real server: mutual TLS and a token on every call, health left open.

The ``guarded`` server (conftest) serves the tiny model on 127.0.0.1 with --tls-cert,
--tls-key, --tls-client-ca and --token-file. These tests only read from it; test_faults.py
restarts and kills it afterwards.
"""

import ast
import pathlib
import subprocess
import sys

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import embedtext
from embedtext.connectors import client_core
from embedtext.protocol import embedding_pb2 as pb
from embedtext.protocol.errors import UnauthenticatedError, UnavailableError
from embedtext.server.config.settings import ServerConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEXTS = ["a cat sat on the mat", "the bank of the river", "ünïcödé and emoji 🙂"]


def test_tls_client_with_certificate_and_token_gets_the_same_vectors(guarded, tiny_client):
    with guarded.client() as client:
        np.testing.assert_allclose(client.embed(TEXTS), tiny_client.embed(TEXTS), atol=1e-6)
        assert client.info().model().name == "tiny"


def test_async_client_over_tls(guarded, tiny_client):
    import asyncio

    async def run():
        async with embedtext.AsyncClient(guarded.target, tls=guarded.tls_config(), token=guarded.token) as client:
            return await client.embed(TEXTS)

    np.testing.assert_allclose(asyncio.run(run()), tiny_client.embed(TEXTS), atol=1e-6)


@pytest.mark.parametrize(
    "token, match",
    [(None, "requires a token"), ("wrong-token", "not valid"), (" ", "empty token")],
    ids=["missing", "wrong", "blank"],
)
def test_missing_or_wrong_token_is_unauthenticated(guarded, token, match, monkeypatch):
    monkeypatch.delenv("EMBEDTEXT_TOKEN", raising=False)
    if token == " ":
        with pytest.raises(ValueError, match=match):
            guarded.client(token=token)
        return
    with guarded.client(token=token) as client:
        with pytest.raises(UnauthenticatedError, match=match):
            client.embed(TEXTS)
        with pytest.raises(UnauthenticatedError, match=match):
            client.info()


def _channel(guarded, **tls):
    return grpc.secure_channel(guarded.target, guarded.tls_config(**tls).credentials())


def test_two_authorization_headers_are_refused(guarded):
    with _channel(guarded) as channel:
        embed = channel.unary_unary(
            "/embedtext.v1.Embedding/Embed",
            request_serializer=pb.EmbedRequest.SerializeToString,
            response_deserializer=pb.EmbedResponse.FromString,
        )
        metadata = (("authorization", "Bearer wrong"), ("authorization", f"Bearer {guarded.token}"))
        with pytest.raises(grpc.RpcError) as info:
            embed(pb.EmbedRequest(texts=pb.TextList(texts=["a"])), metadata=metadata, timeout=10)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_health_is_open_but_reflection_needs_the_token(guarded):
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    with _channel(guarded) as channel:
        status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10).status
        assert status == health_pb2.HealthCheckResponse.SERVING
        reflect = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10
        )
        with pytest.raises(grpc.RpcError) as info:
            list(reflect)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert guarded.metrics()["embedtext_unauthenticated_total"] >= 1


@pytest.mark.parametrize(
    "tls, match",
    [
        ("plain", "TLS"),  # a plaintext client to the TLS port
        ({"cert": None, "key": None}, "client certificate"),  # TLS without a client certificate
        ("rogue-client", "client certificate"),  # a client certificate from another CA
        ("rogue-ca", "TLS"),  # the client does not trust the server's certificate
    ],
    ids=["plaintext", "no-client-cert", "untrusted-client-cert", "untrusted-server"],
)
def test_handshake_failures_are_unavailable_with_a_hint(guarded, tls, match, monkeypatch):
    # a shorter wait for the server to come back than the default 5 s: the message is the check
    monkeypatch.setattr(client_core, "RECONNECT_WAIT_S", 0.5)
    if tls == "plain":
        kwargs = {"tls": False}
    elif tls == "rogue-client":
        kwargs = {"tls": guarded.tls_config(cert=guarded.tls.rogue_client_pem, key=guarded.tls.rogue_client_key)}
    elif tls == "rogue-ca":
        kwargs = {"tls": guarded.tls_config(ca=guarded.tls.rogue_ca_pem)}
    else:
        kwargs = {"tls": guarded.tls_config(**tls)}
    with guarded.client(timeout=10, **kwargs) as client:
        with pytest.raises(UnavailableError, match=match):
            client.embed(TEXTS)


def test_environment_configures_clients_and_the_cli(guarded, tiny_client, monkeypatch, embedtext_info):
    for key, value in guarded.client_env().items():
        monkeypatch.setenv(key, value)
    with embedtext.Client(guarded.target) as client:  # token and TLS from EMBEDTEXT_TOKEN / EMBEDTEXT_TLS_*
        np.testing.assert_allclose(client.embed(TEXTS), tiny_client.embed(TEXTS), atol=1e-6)
    assert "tiny" in embedtext_info(guarded.target)


def test_token_is_never_sent_in_clear_text_over_a_network():
    with pytest.raises(ValueError, match="without TLS"):
        embedtext.Client("10.1.2.3:50051", token="secret", tls=False)
    embedtext.Client("127.0.0.1:50051", token="secret", tls=False).close()  # loopback: allowed
    embedtext.Client("unix:/tmp/x.sock", token="secret").close()  # Unix socket: allowed


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(host="0.0.0.0"), "needs TLS"),
        (dict(host="0.0.0.0", token="t"), "needs TLS"),
        (dict(host="10.0.0.1", tls_cert="c.pem", tls_key="k.pem"), "needs TLS"),
        (dict(tls_cert="c.pem"), "both --tls-cert and --tls-key"),
        (dict(tls_client_ca="ca.pem"), "needs --tls-cert"),
        (dict(token="a\nb"), "line break"),
        (dict(token=""), "empty"),
    ],
)
def test_server_refuses_unsafe_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ServerConfig(**kwargs)
    ServerConfig(host="0.0.0.0", tls_cert="c.pem", tls_key="k.pem", token="t")  # the safe form is accepted


def test_serve_refuses_a_public_interface_without_tls_and_token():
    out = subprocess.run(
        [sys.executable, "-m", "embedtext.server", "--host", "0.0.0.0", "--set", "engine=null"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "needs TLS" in out.stderr


def test_token_does_not_appear_in_the_config_repr():
    assert "s3cret" not in repr(ServerConfig(token="s3cret"))


# --- no pickle on the wire ---------------------------------------------------------------

_UNSAFE_MODULES = {"pickle", "cPickle", "cloudpickle", "dill", "marshal", "shelve", "joblib"}


def test_no_pickle_in_the_wire_path():
    """Nothing that serves or sends requests imports a pickle-like module; the service is
    registered with protobuf (de)serializers only."""
    wire_path = [
        *(ROOT / "protocol").glob("*.py"),
        *(ROOT / "server").glob("*.py"),
        *(ROOT / "udf").glob("*.py"),
        *(ROOT / "connectors").glob("*.py"),
    ]
    wire_path = [p for p in wire_path if p.name != "ray.py"]  # Ray's own task transport, not ours
    assert len(wire_path) > 20
    for path in wire_path:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module.split(".")[0]]
            assert not set(names) & _UNSAFE_MODULES, f"{path.name} imports {names}"
            if isinstance(node, ast.keyword) and node.arg == "allow_pickle":
                raise AssertionError(f"{path.name} uses allow_pickle")

    from embedtext.server.api import servicer

    class Recorder:
        def add_generic_rpc_handlers(self, handlers):
            self.handlers = handlers

        def add_registered_method_handlers(self, service, handlers):
            self.methods = handlers

    recorder = Recorder()
    servicer.add_service(type("S", (), {"Embed": None, "Info": None, "Split": None})(), recorder)
    # Replies are written by protobuf itself or by reply_wire, which splices raw float bytes into
    # protobuf's own output (checked against protobuf's parser in test_reply_wire).
    from embedtext.protocol import reply_wire

    protobuf_writers = {reply_wire.serialize_reply}
    for handler in recorder.methods.values():
        serializer = handler.response_serializer
        assert serializer in protobuf_writers or serializer.__qualname__.endswith("SerializeToString"), serializer
        assert handler.request_deserializer.__qualname__ == "tolerant.<locals>.deserialize"
