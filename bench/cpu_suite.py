"""CPU suite: the same model and rows through DuckDB ``embed_text``, a UDF posting JSON to vLLM's
HTTP server and vLLM's ``LLM.embed`` in-process on token ids (the ceiling), every engine resident,
in rotating rounds; docs/benchmarks.md."""

from __future__ import annotations

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
            self.ceiling = ResidentInProcess(model_dir, eager=eager)
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


def run_cpu_suite(server, peers: CpuPeers, corpus: BenchCorpus, dim: int, work, *, rounds: int, progress=print):
    """The paths in rotating rounds on a running embedtext server and ``peers``; ``work``: (tokens, rows)."""
    peers.wait_ready()
    with duckdb.connect() as con:
        embedtext.register(con, server.target)
        http_embedder = OpenAIJsonEmbedder(peers.http.url, SERVED_NAME)
        register_udf(con, "http_embed", http_embedder, dim)
        ours, http = (
            scan_measure(con, SUITE, "embed_text", server.pid),
            scan_measure(con, SUITE, "http_embed", peers.http.pid),
        )

        paths = [
            RoundsPath("ours", "udf_embed_text", "DuckDB embed_text -> embedtext gRPC (bytes) -> vLLM", ours),
            RoundsPath(
                "http_json", "udf_vllm_http_json", "DuckDB Arrow UDF -> vLLM OpenAI /v1/embeddings (JSON floats)", http
            ),
            RoundsPath(
                "ceiling",
                "inprocess_llm_embed",
                "vllm.LLM.embed(token ids)",
                lambda w, warmup: peers.ceiling.run(w.tokens, w.rows, warmup=warmup),
            ),
        ]
        progress(f"cpu: {list(work)}, {len(paths)} paths, every engine resident, {rounds} rotating rounds")
        workloads = [Workload(tokens, rows) for tokens, rows in work]
        try:
            return run_rounds(
                paths,
                workloads,
                suite=SUITE,
                rounds=rounds,
                ratios=RATIOS,
                progress=progress,
                load=lambda w: load_docs(con, corpus.texts(w.rows, w.tokens)),
            )
        finally:
            http_embedder.close()
