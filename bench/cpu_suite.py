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
from embedtext.bench.inprocess import ResidentInProcess
from embedtext.bench.queries import load_docs, scan_measure
from embedtext.bench.rounds import Ratio, RoundsPath, Workload, run_rounds
from embedtext.bench.servers import vllm_http_server

SUITE = "cpu"
SERVED_NAME = "tiny"
# Ours / each peer (labels as in run_cpu_suite), round by round; no suffix at 50 tokens.
RATIOS = (
    Ratio("udf_vs_http_json{suffix}", "ours", "http_json"),
    Ratio("udf_vs_inprocess{suffix}", "ours", "ceiling"),
    Ratio("udf_vs_inprocess_text{suffix}", "ours", "ceiling_text"),
)


class CpuPeers:
    """The other paths' engines: vLLM's OpenAI server and ``LLM`` in a child process. Both start
    at construction and are waited for in ``run_cpu_suite``, so their start-ups overlap ours."""

    def __init__(self, model_dir: str, *, max_tokens: int, eager: bool = False) -> None:
        self.http = vllm_http_server(
            model_dir, SERVED_NAME, max_tokens=max_tokens, extra=["--set", "enforce_eager=on"] if eager else []
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
            return scan_measure(con, SUITE, fn, pid)

        def in_process(text: bool):
            return lambda w, warmup: peers.ceiling.run(w.tokens, w.rows, warmup=warmup, text=text)

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
            ),
            RoundsPath(
                "ceiling",
                "inprocess_llm_embed",
                "vllm.LLM.embed(token ids)",
                in_process(False),
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
                    engine="inprocess",
                )
            )
        progress(f"cpu: {list(work)}, {len(paths)} paths, every engine resident, {rounds} rotating rounds")
        try:
            return run_rounds(
                paths,
                [Workload(tokens, rows) for tokens, rows in work],
                suite=SUITE,
                rounds=rounds,
                ratios=RATIOS,
                progress=progress,
                load=lambda w: load_docs(con, corpus.texts(w.rows, w.tokens)),
            )
        finally:
            http_embedder.close()
