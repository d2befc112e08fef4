"""The cpu suite's peers compute the model's vectors: fastembed on a local ONNX export and
sentence-transformers agree on the real all-MiniLM-L6-v2, inside DuckDB (no server)."""

import duckdb
import numpy as np
import pytest

TEXTS = [
    "A cat sleeps on the warm windowsill.",
    "Copy a whole directory tree.",
    "Stock markets fell sharply after the interest rate decision, and bond yields rose again.",
    "word " * 300,  # past the model's 256 tokens (its tokenizer_config says 512): truncated by both at 256
    "",
]


@pytest.fixture(scope="module")
def peers(tmp_path_factory):
    from embedtext.bench.cpu_peers import (
        FastembedEmbedder,
        SentenceTransformersEmbedder,
        export_onnx,
        fastembed_model_dir,
    )
    from embedtext.server.models.source import load_model_spec

    spec = load_model_spec("default")
    onnx_path = export_onnx(spec.path, tmp_path_factory.mktemp("onnx") / "model.onnx")
    return spec, {
        "st_embed": SentenceTransformersEmbedder(spec.path, threads=2, batch_rows=2),
        "ort_embed": FastembedEmbedder(
            fastembed_model_dir(spec.path, onnx_path, spec.max_tokens), dim=spec.dim, threads=2
        ),
    }


def test_fastembed_on_the_onnx_export_gives_sentence_transformers_vectors(peers):
    _, embedders = peers
    st = embedders["st_embed"].embed(TEXTS)
    ort = embedders["ort_embed"].embed(TEXTS)
    assert st.shape == ort.shape == (len(TEXTS), 384)
    cos = (st * ort).sum(1) / (np.linalg.norm(st, axis=1) * np.linalg.norm(ort, axis=1))
    assert cos.min() >= 0.99999, cos


def test_peers_run_as_duckdb_arrow_functions(peers):
    from embedtext.bench.baselines import register_udf

    spec, embedders = peers
    con = duckdb.connect()
    for name, fn in embedders.items():
        register_udf(con, name, fn, spec.dim)
    con.execute("CREATE TABLE docs AS SELECT unnest(?) AS body", [TEXTS[:3]]).fetchall()
    rows = con.execute(
        "SELECT typeof(st_embed(body)), list_cosine_similarity(st_embed(body), ort_embed(body)) FROM docs"
    ).fetchall()
    assert [r[0] for r in rows] == ["FLOAT[384]"] * 3
    assert min(r[1] for r in rows) >= 0.99999


def test_sentence_transformers_in_bfloat16_computes_in_it_and_keeps_the_vectors(peers):
    import torch

    from embedtext.bench.cpu_peers import SentenceTransformersEmbedder

    spec, embedders = peers
    bf16 = SentenceTransformersEmbedder(spec.path, threads=2, batch_rows=2, dtype="bfloat16")
    assert {p.dtype for p in bf16.model.parameters()} == {torch.bfloat16}
    vectors = bf16.embed(TEXTS)
    assert vectors.dtype == np.float32 and vectors.shape == (len(TEXTS), 384)
    st = embedders["st_embed"].embed(TEXTS)
    cos = (st * vectors).sum(1) / (np.linalg.norm(st, axis=1) * np.linalg.norm(vectors, axis=1))
    assert 0.999 <= cos.min() < 1 - 1e-7, cos  # close, and not float32's vectors
