"""dtype suite: what bfloat16 costs in quality, and what it gains in rows/s, on the real model.

The default model (all-MiniLM-L6-v2) embeds the demo corpus (the standard library's docstring
paragraphs, embedtext/corpus.py) on two embedtext servers, ``--dtype float32`` and
``--dtype bfloat16``, both resident and timed in rotating rounds (bench/rounds.py).
sentence-transformers on the same weights is the reference. Quality, over every paragraph:

  cosine of each row's bf16 vector with its float32 and sentence-transformers vectors
  (the 1st percentile and the minimum), and top-10 retrieval overlap: each of the held-out
  queries (every 10th paragraph) searches the others with bf16 vectors and with float32 ones;
  the share of the float32 top 10 that bf16 also finds (mean and worst query). ``mixed``: a
  float32 index searched with bf16 queries (an index and its queries on different dtypes).

``--dtype auto`` on a CPU (server/host/cpu_features.py) picks bfloat16 where these hold:
``dtype_bf16_cosine_p01`` >= 0.999 and ``dtype_bf16_top10_overlap`` >= 0.95.

    uv run --extra cpu embedtext bench --only dtype
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

SUITE = "dtype"
QUERY_EVERY = 10  # every 10th paragraph is a held-out query
TOP_K = 10


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine of each row of ``a`` with the same row of ``b``.

    >>> row_cosines(np.array([[1.0, 0.0], [0.0, 2.0]]), np.array([[1.0, 1.0], [0.0, 1.0]])).round(3).tolist()
    [0.707, 1.0]
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def top_k(index: np.ndarray, queries: np.ndarray, query_rows: np.ndarray, k: int = TOP_K) -> np.ndarray:
    """Row numbers of each query's ``k`` nearest index rows by cosine, its own row left out."""
    index = index / np.linalg.norm(index, axis=1, keepdims=True)
    queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    scores = queries @ index.T
    scores[np.arange(len(query_rows)), query_rows] = -np.inf
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


def overlap(found: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Per query, the share of ``expected``'s rows that ``found`` holds too.

    >>> overlap(np.array([[1, 2, 3], [4, 5, 6]]), np.array([[3, 2, 1], [4, 7, 8]])).round(3).tolist()
    [1.0, 0.333]
    """
    return np.array([len(set(f) & set(e)) / len(e) for f, e in zip(found, expected, strict=True)])


def quality_ratios(float32: np.ndarray, bf16: np.ndarray, reference: np.ndarray | None) -> dict[str, float]:
    """The suite's quality figures from three embeddings of the same rows."""
    rows = np.arange(0, len(float32), QUERY_EVERY)
    want = top_k(float32, float32[rows], rows)
    cos = row_cosines(bf16, float32)
    bf16_overlap = overlap(top_k(bf16, bf16[rows], rows), want)
    out = {
        "dtype_bf16_cosine_p01": float(np.percentile(cos, 1)),
        "dtype_bf16_cosine_min": float(cos.min()),
        "dtype_bf16_top10_overlap": float(bf16_overlap.mean()),
        "dtype_bf16_top10_overlap_worst": float(bf16_overlap.min()),
        "dtype_mixed_top10_overlap": float(overlap(top_k(float32, bf16[rows], rows), want).mean()),
    }
    if reference is not None:
        out["dtype_float32_vs_reference_cosine_min"] = float(row_cosines(float32, reference).min())
        out["dtype_bf16_vs_reference_cosine_p01"] = float(np.percentile(row_cosines(bf16, reference), 1))
    return {k: round(v, 6) for k, v in out.items()}


def dtype_ratios(cases: Sequence[dict]) -> dict[str, float]:
    """The quality figures (bf16 / float32 rows/s is a declared ratio: bench/rounds.py)."""
    out: dict[str, float] = {}
    for case in cases:
        if case["suite"] == SUITE and "quality" in case:
            out.update(case["quality"])
    return out


def run_dtype_suite(texts: list[str], *, rounds: int, args: Sequence[str] = (), progress=print) -> list[dict]:
    """Both servers up at once; embed ``texts`` on each in rounds, then compare the vectors."""
    import os
    from contextlib import ExitStack

    from embedtext.bench.corpus import BenchCorpus
    from embedtext.bench.cpu_peers import SentenceTransformersEmbedder
    from embedtext.bench.measure import make_case
    from embedtext.bench.rounds import Ratio, RoundsPath, Workload, run_rounds
    from embedtext.bench.servers import embedtext_server
    from embedtext.connectors.client import Client
    from embedtext.server.models.source import load_model_spec

    spec = load_model_spec("default")
    vectors: dict[str, np.ndarray] = {}
    progress(f"dtype: {len(texts)} docstring paragraphs, float32 and bfloat16 servers side by side, {rounds} rounds")
    with ExitStack() as stack:
        servers = {
            dtype: stack.enter_context(embedtext_server(["default"], args=["--dtype", dtype, *args]))
            for dtype in ("float32", "bfloat16")
        }
        clients = {dtype: stack.enter_context(Client(server.target)) for dtype, server in servers.items()}

        def measure(dtype: str):
            def run(workload: Workload, warmup: bool) -> dict:
                import time

                if warmup:
                    clients[dtype].embed(texts[:256])
                started = time.perf_counter()
                vectors[dtype] = clients[dtype].embed(texts)
                return make_case(
                    f"embed_{dtype}",
                    SUITE,
                    rows=len(texts),
                    seconds=time.perf_counter() - started,
                    tokens_per_row=workload.tokens,
                )

            return run

        paths = [
            RoundsPath("bfloat16", "server_bfloat16", "embedtext server --dtype bfloat16", measure("bfloat16")),
            RoundsPath(
                "float32",
                "server_float32",
                "embedtext server --dtype float32",
                measure("float32"),
            ),
        ]
        mean_tokens = round(float(np.mean([len(ids) for ids in BenchCorpus(spec.path).token_ids(texts)])), 1)
        cases = run_rounds(
            paths,
            [Workload(mean_tokens, len(texts))],
            suite=SUITE,
            rounds=rounds,
            ratios=[Ratio("dtype_bf16_vs_float32_rows_per_s", "bfloat16", "float32")],
            progress=progress,
        )
    progress("dtype: sentence-transformers reference (float32)")
    reference = SentenceTransformersEmbedder(spec.path, threads=os.cpu_count() or 1, batch_rows=64).embed(texts)
    quality = quality_ratios(vectors["float32"], vectors["bfloat16"], reference)
    cases.append(
        make_case(
            "dtype_quality",
            SUITE,
            rows=len(texts),
            seconds=0,
            tokens_per_row=None,
            quality=quality,
            queries=len(range(0, len(texts), QUERY_EVERY)),
            top_k=TOP_K,
        )
    )
    return cases
