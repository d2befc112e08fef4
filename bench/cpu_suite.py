"""CPU suite: the same model and rows through four paths, every engine resident, timed in rotating
rounds (bench/rounds.py: the host's drift hits every path alike).

  udf_embed_text_{T}tok       DuckDB ``SELECT sum(embed_text(body)[1])`` on a vLLM-CPU embedtext
                              server (one replica): DuckDB -> Arrow -> gRPC bytes -> tokenizer ->
                              batcher -> vLLM -> bytes -> Arrow
  udf_vllm_http_json_{T}tok   the naive path: an Arrow UDF posting JSON to vLLM's own
                              OpenAI-compatible ``/v1/embeddings`` (same install, same engine
                              settings, 512-row requests, 8 in flight), JSON floats back
  inprocess_llm_embed_{T}tok  the ceiling: ``vllm.LLM.embed`` in-process on token ids
  inprocess_llm_embed_text_{T}tok  what an in-process user runs: ``LLM.embed`` on the texts
                              (vLLM tokenizes; the ceiling above does not tokenize at all)

T = 50 and 512 tokens per row. Ratios, each the median of its per-round ratios:
``udf_vs_inprocess`` = 1 / 3, ``udf_vs_http_json`` = 1 / 2, ``udf_vs_inprocess_text`` = 1 / 4
(the keys without a suffix are at 50 tokens; ``_512`` at 512).

    uv run --extra cpu embedtext bench --only cpu
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb

import embedtext
from embedtext.bench.baselines import OpenAIJsonEmbedder, register_udf
from embedtext.bench.corpus import BenchCorpus
from embedtext.bench.inprocess import ResidentInProcess, run_inprocess
from embedtext.bench.queries import embed_query_case, load_docs
from embedtext.bench.rounds import HEADLINE_TOKENS, RoundsPath, rounds_ratios, run_rounds
from embedtext.bench.servers import vllm_http_server

SUITE = "cpu"
SERVED_NAME = "tiny"
# ratio key -> the peer's case prefix (ours: udf_embed_text)
PEERS = (
    ("udf_vs_http_json", "udf_vllm_http_json"),
    ("udf_vs_inprocess", "inprocess_llm_embed"),
    ("udf_vs_inprocess_text", "inprocess_llm_embed_text"),
)


class CpuPeers:
    """The other paths' engines: vLLM's OpenAI server and ``LLM`` in a child process. Both start
    at construction and are waited for in ``run_cpu_suite``, so their start-ups overlap ours."""

    def __init__(self, model_dir: str, *, max_tokens: int, eager: bool = False) -> None:
        self.http = vllm_http_server(
            model_dir, SERVED_NAME, max_tokens=max_tokens, extra=["--enforce-eager"] if eager else []
        )
        self.http.start()
        try:
            self.ceiling = ResidentInProcess(model_dir, suite=SUITE, eager=eager)
        except BaseException:
            self.http.stop()
            raise

    def wait_ready(self) -> None:
        self.http.wait_ready()
        self.ceiling.wait_ready()

    def close(self) -> None:
        self.ceiling.close()
        self.http.stop()

    def __enter__(self) -> CpuPeers:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def run_cpu_suite(
    server,
    peers: CpuPeers,
    corpus: BenchCorpus,
    dim: int,
    work: Sequence[tuple[int, int]],
    *,
    rounds: int,
    texts_path: bool = True,
    progress=print,
) -> list[dict]:
    """The paths in rotating rounds on a running embedtext server and ``peers``; ``work``: (tokens,
    rows). ``texts_path=False`` leaves out path 4 (quick runs)."""
    peers.wait_ready()
    with duckdb.connect() as con:
        embedtext.register(con, server.target)
        http_embedder = OpenAIJsonEmbedder(peers.http.url, SERVED_NAME)
        register_udf(con, "http_embed", http_embedder, dim)

        def scan(fn: str, pid: int):
            return lambda tokens, rows, warmup: embed_query_case(
                con, "run", SUITE, fn=fn, source="docs", rows=rows, tokens_per_row=tokens, server_pid=pid, warmup=warmup
            )

        def in_process(text: bool):
            return lambda tokens, rows, warmup: peers.ceiling.run(tokens, rows, warmup=warmup, text=text)

        paths = [
            RoundsPath(
                "ours",
                "udf_embed_text",
                "DuckDB embed_text -> embedtext gRPC (bytes) -> vLLM",
                scan("embed_text", server.pid),
            ),
            RoundsPath(
                "http_json",
                "udf_vllm_http_json",
                "DuckDB Arrow UDF -> vLLM OpenAI /v1/embeddings (JSON floats)",
                scan("http_embed", peers.http.pid),
                ratio_key="udf_vs_http_json",
            ),
            RoundsPath(
                "ceiling",
                "inprocess_llm_embed",
                "vllm.LLM.embed(token ids)",
                in_process(False),
                ratio_key="udf_vs_inprocess",
                engine="inprocess",
            ),
        ]
        if texts_path:
            paths.append(
                RoundsPath(
                    "ceiling_text",
                    "inprocess_llm_embed_text",
                    "vllm.LLM.embed(texts)",
                    in_process(True),
                    ratio_key="udf_vs_inprocess_text",
                    engine="inprocess",
                )
            )
        progress(f"cpu: {list(work)}, {len(paths)} paths, every engine resident, {rounds} rotating rounds")
        try:
            return run_rounds(
                paths,
                work,
                suite=SUITE,
                rounds=rounds,
                progress=progress,
                load=lambda tokens, rows: load_docs(con, corpus.texts(rows, tokens)),
            )
        finally:
            http_embedder.close()


def measure_embedtext(
    server, corpus: BenchCorpus, work: Sequence[tuple[int, int]], *, chunk_cases: bool = False, repeats: int = 1
) -> list[dict]:
    """Path 1 alone on a running embedtext server (``python -m embedtext.bench.udf_vs_inprocess``);
    ``chunk_cases`` adds the filtered-chunk cases."""
    cases = []
    con = duckdb.connect()
    embedtext.register(con, server.target)
    for tokens, rows in work:
        load_docs(con, corpus.texts(rows, tokens))
        cases.append(
            embed_query_case(
                con,
                f"udf_embed_text_{tokens}tok",
                SUITE,
                fn="embed_text",
                source="docs",
                rows=rows,
                tokens_per_row=tokens,
                server_pid=server.pid,
                repeats=repeats,
                path="DuckDB embed_text -> embedtext gRPC (bytes) -> vLLM",
            )
        )
        if chunk_cases:
            cases += _chunk_cases(con, server, rows, tokens)
    con.close()
    return cases


def _chunk_cases(con, server, rows: int, tokens: int) -> list[dict]:
    """Short chunks after a filter (~205 rows each), and the same filter materialized first."""
    filtered = con.execute("SELECT count(*) FROM docs WHERE id % 10 = 0").fetchall()[0][0]
    common = dict(fn="embed_text", rows=filtered, tokens_per_row=tokens, server_pid=server.pid, warmup=False)
    cases = [
        embed_query_case(
            con, f"udf_filtered_chunks_{tokens}tok", SUITE, source="docs", where="WHERE id % 10 = 0", **common
        )
    ]
    con.execute("CREATE OR REPLACE TEMP TABLE f AS SELECT * FROM docs WHERE id % 10 = 0").fetchall()
    cases.append(embed_query_case(con, f"udf_materialized_{tokens}tok", SUITE, source="f", **common))
    return cases


def measure_inprocess(
    model_dir: str, work: Sequence[tuple[int, int]], *, eager: bool = False, repeats: int = 1
) -> list[dict]:
    """Path 3 alone, in a child process (its engine is gone when it returns)."""
    return run_inprocess(model_dir, list(work), suite=SUITE, eager=eager, text=True, repeats=repeats)


def cpu_ratios(cases: list[dict]) -> dict[str, float]:
    """Ours / each peer at each token length: the median of the per-round ratios where the paths
    ran in rounds, else (paths timed one after the other) the ratio of their rows/s."""
    by = {c["name"]: c["rows_per_s"] for c in cases if c["suite"] == SUITE}
    ratios = {}
    tokens = sorted({int(c["tokens_per_row"]) for c in cases if c["suite"] == SUITE})
    for t in tokens:
        suffix = "" if t == HEADLINE_TOKENS else f"_{t}"
        ours = by.get(f"udf_embed_text_{t}tok")
        for key, other in PEERS:
            if ours and by.get(f"{other}_{t}tok"):
                ratios[key + suffix] = round(ours / by[f"{other}_{t}tok"], 3)
        if by.get(f"udf_filtered_chunks_{t}tok") and ours:
            ratios[f"filtered_vs_full_chunks{suffix}"] = round(by[f"udf_filtered_chunks_{t}tok"] / ours, 3)
            ratios[f"materialized_vs_filtered{suffix}"] = round(
                by[f"udf_materialized_{t}tok"] / by[f"udf_filtered_chunks_{t}tok"], 3
            )
    return {**ratios, **rounds_ratios(cases, SUITE)}
