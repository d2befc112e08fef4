"""The servers a benchmark starts and stops, each a process tree: ours, vLLM's OpenAI server, the
null JSON server."""

from __future__ import annotations

import socket
import sys
import time
import urllib.request
from collections.abc import Sequence
from contextlib import contextmanager

from embedtext.connectors.local_server import LocalServer
from embedtext.server.host.tuning import host_tuning


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def embedtext_server(
    models: Sequence[str],
    *,
    replicas: int | None = None,
    args: Sequence[str] = (),
    timeout: float = 900,
    env: dict[str, str] | None = None,
):
    """A running ``embedtext serve`` (one process tree); yields the LocalServer."""
    server = LocalServer(list(models), replicas=replicas, args=["--log-level", "WARNING", *args], env=env)
    server.start()
    try:
        server.wait_ready(timeout, every_engine=True)  # timed phases run at full speed
        yield server
    finally:
        server.stop()


class HttpServerProcess(LocalServer):
    """A child HTTP server (LocalServer's process handling), ready once ``GET /health`` answers 200."""

    def __init__(self, command: list[str], port: int, name: str, env: dict[str, str] | None = None) -> None:
        super().__init__(port=port, env={"VLLM_NO_USAGE_STATS": "1", "VLLM_DO_NOT_TRACK": "1", **(env or {})})
        self.command = command
        self.name = name
        self.url = f"http://127.0.0.1:{port}"

    def wait_ready(self, timeout: float = 900.0, on_wait=None) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with code {self.process.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.name} not ready in {timeout:.0f}s:\n{self.log_tail()}")
            time.sleep(0.5)


def vllm_http_server(
    model_dir: str, served_name: str, *, extra: Sequence[str] = (), on_cpu: bool = True, **settings
) -> HttpServerProcess:
    """vLLM's own OpenAI-compatible server from the same install, with our engine's settings
    (``settings``: ``vllm_http_command``'s)."""
    port = free_port()
    command = vllm_http_command(model_dir, served_name, port=port, **settings)
    # On a CPU, what embedtext's server gives its engines: every core on a small machine, and
    # tcmalloc where the system has one. LD_PRELOAD reaches vLLM's API process too (ours keeps
    # glibc in its own process): if anything, that favours this baseline.
    env = host_tuning("cpu").env if on_cpu else {}
    return HttpServerProcess([*command, *extra], port, "vllm-openai", env)


def vllm_http_command(
    model_dir: str,
    served_name: str,
    *,
    port: int,
    max_tokens: int,
    max_batch_tokens: int = 16384,
    max_num_seqs: int = 1024,
    dtype: str = "float32",
    memory_fraction: float = 0.2,
) -> list[str]:
    """The command line of vLLM's OpenAI-compatible server for a pooling model (the GPU kit's checks
    parse it with the installed vLLM)."""
    flags = {
        "--model": model_dir,
        "--served-model-name": served_name,
        "--runner": "pooling",
        "--convert": "embed",
        "--dtype": dtype,
        "--gpu-memory-utilization": memory_fraction,
        "--max-model-len": max_tokens,
        "--max-num-batched-tokens": max(max_batch_tokens, max_tokens),
        "--max-num-seqs": max_num_seqs,
        "--uvicorn-log-level": "warning",
        "--host": "127.0.0.1",
        "--port": port,
    }
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--no-enable-prefix-caching"]
    return command + ["--disable-log-stats", *(str(x) for flag, value in flags.items() for x in (flag, value))]


def null_json_server(models: dict[str, str]) -> HttpServerProcess:
    """The bench-only OpenAI-format JSON server over the null engine's vectors."""
    port = free_port()
    command = [sys.executable, "-m", "embedtext.bench.null_json_server", "--port", str(port)]
    for name, path in models.items():
        command += ["--model", f"{name}={path}"]
    return HttpServerProcess(command, port, "null-json")
