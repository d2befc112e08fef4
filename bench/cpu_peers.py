"""The cpu suite's peers: what a data engineer on a CPU would call inside a DuckDB UDF instead
(sentence-transformers, fastembed on ONNX Runtime), on the default model at the same threads
(docs/benchmarks.md). The ONNX model is exported here from the model directory: no hub.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

import numpy as np

from embedtext.bench.baselines import ArrowEmbedder
from embedtext.bench.rounds import Ratio, RoundsPath, Workload, run_rounds

# Rows per model call of sentence-transformers: its default (fastembed keeps its own, 256).
PEER_BATCH_ROWS = 32
# label -> (case prefix, what the path runs); the auto paths in the dtype ``--dtype auto`` picks.
PATHS = {
    "ours": ("udf_embed_text_default", "DuckDB embed_text -> embedtext gRPC -> vLLM (float32)"),
    "sentence_transformers": ("udf_sentence_transformers", "DuckDB Arrow UDF -> SentenceTransformer.encode"),
    "onnxruntime": ("udf_fastembed_onnxruntime", "DuckDB Arrow UDF -> fastembed -> ONNX Runtime (local export)"),
    "ours_auto": ("udf_embed_text_auto", "DuckDB embed_text -> embedtext gRPC -> vLLM (--dtype auto: {auto})"),
    "sentence_transformers_auto": (
        "udf_sentence_transformers_auto",
        "DuckDB Arrow UDF -> SentenceTransformer ({auto})",
    ),
}
# Rows/s, numerator / denominator (no suffix at 50 tokens, _512 at 512).
RATIOS = (
    Ratio("udf_vs_sentence_transformers{suffix}", "ours", "sentence_transformers"),
    Ratio("udf_vs_onnxruntime{suffix}", "ours", "onnxruntime"),
)
AUTO_RATIOS = (
    Ratio("udf_auto_vs_sentence_transformers{suffix}", "ours_auto", "sentence_transformers"),
    Ratio("udf_auto_vs_onnxruntime{suffix}", "ours_auto", "onnxruntime"),
    Ratio("udf_auto_vs_sentence_transformers_same_dtype{suffix}", "ours_auto", "sentence_transformers_auto"),
)


class SentenceTransformersEmbedder(ArrowEmbedder):
    """``SentenceTransformer(model_dir).encode(chunk)`` as a DuckDB Arrow UDF."""

    def __init__(self, model_dir, *, threads: int, batch_rows: int = PEER_BATCH_ROWS, dtype: str = "float32") -> None:
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(threads)
        self.model = SentenceTransformer(str(model_dir), device="cpu", model_kwargs={"dtype": getattr(torch, dtype)})
        self.batch_rows = batch_rows

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.model.encode(texts, batch_size=self.batch_rows, convert_to_numpy=True, normalize_embeddings=True)


def export_onnx(model_dir: str | os.PathLike, out: str | os.PathLike) -> Path:
    """The model's encoder as ONNX (token ids -> last hidden state), batch and length dynamic."""
    import torch
    from transformers import AutoModel

    out = Path(out)
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    encoder = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager").eval()

    class LastHiddenState(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    ids = torch.ones(2, 16, dtype=torch.long)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    # The tracer warns about Python values in the attention mask's code; the graph keeps both axes dynamic.
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            LastHiddenState().eval(),
            (ids, torch.ones_like(ids), torch.zeros_like(ids)),
            str(out),
            dynamo=False,
            opset_version=17,
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes={n: {0: "batch", 1: "tokens"} for n in [*names, "last_hidden_state"]},
        )
    return out


def fastembed_model_dir(model_dir: str | os.PathLike, onnx_path: Path, max_tokens: int) -> Path:
    """fastembed's model directory beside the ONNX export, truncating where the other paths do."""
    out = onnx_path.parent
    for name in ("tokenizer.json", "special_tokens_map.json", "config.json"):
        shutil.copyfile(Path(model_dir) / name, out / name)
    config = json.loads((Path(model_dir) / "tokenizer_config.json").read_text())
    config["model_max_length"] = max_tokens
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    return out


class FastembedEmbedder(ArrowEmbedder):
    """fastembed's ``TextEmbedding`` on the local ONNX export, as a DuckDB Arrow UDF: ONNX Runtime
    with fastembed's own tokenizing, batching (256 rows), pooling and session settings."""

    NAME = "embedtext-bench/all-MiniLM-L6-v2-onnx"  # what fastembed's registry knows the export as

    def __init__(self, fastembed_dir: str | os.PathLike, *, dim: int, threads: int) -> None:
        from fastembed import TextEmbedding
        from fastembed.common.model_description import ModelSource, PoolingType

        if self.NAME not in {m["model"] for m in TextEmbedding.list_supported_models()}:
            TextEmbedding.add_custom_model(
                self.NAME,
                pooling=PoolingType.MEAN,
                normalization=True,
                sources=ModelSource(hf="sentence-transformers/all-MiniLM-L6-v2"),  # provenance: never fetched
                dim=dim,
                model_file="model.onnx",
            )
        self.model = TextEmbedding(
            self.NAME, threads=threads, specific_model_path=str(fastembed_dir), local_files_only=True
        )

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.asarray(list(self.model.embed(texts)), dtype=np.float32)


def run_cpu_peers(
    corpus, work: Sequence[tuple[int, int]], *, rounds: int, workdir: Path, args: Sequence[str] = (), progress=print
) -> list[dict]:
    """embed_text vs the two peers on the default model, in rotating rounds."""
    import duckdb

    import embedtext
    from embedtext.bench.baselines import register_udf
    from embedtext.bench.queries import load_docs, scan_measure
    from embedtext.bench.servers import embedtext_server
    from embedtext.server.config.resolve import resolve
    from embedtext.server.config.settings import ServerConfig
    from embedtext.server.models.source import load_model_spec

    spec = load_model_spec("default")
    threads = len(os.sched_getaffinity(0))  # every core this process may use, as the server's engines
    progress(f"cpu peers: {spec.name}, float32, {threads} threads each: sentence-transformers and fastembed UDFs")
    onnx_dir = fastembed_model_dir(spec.path, export_onnx(spec.path, workdir / "onnx" / "model.onnx"), spec.max_tokens)
    peers = {  # each a DuckDB function of its label's name
        "sentence_transformers": SentenceTransformersEmbedder(spec.path, threads=threads),
        "onnxruntime": FastembedEmbedder(onnx_dir, dim=spec.dim, threads=threads),
    }
    # A user's server computes in --dtype auto: bfloat16 on a CPU with bfloat16 instructions
    # (quality: bench/results/dtype.json). Timed beside the float32 comparison the targets are set on.
    auto = resolve(ServerConfig(engine_loop="packed"), "cpu", memory_bytes=0).dtype.dtype
    sample = corpus.texts(64, 50, seed=3)
    with ExitStack() as stack:

        def server_connection(dtype_args: list[str]):
            server = stack.enter_context(embedtext_server(["default"], args=[*dtype_args, *args]))
            con = stack.enter_context(duckdb.connect())
            embedtext.register(con, server.target)
            with embedtext.Client(server.target) as client:
                return server, con, client.embed(sample)

        server, con, ours = server_connection(["--dtype", "float32"])

        def min_cosine(vectors: np.ndarray) -> float:
            """The worst row's cosine to embed_text's float32 vectors of the sample."""
            a, b = np.asarray(ours, np.float64), np.asarray(vectors, np.float64)
            return round(float(((a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))).min()), 7)

        def scan(label: str, connection, fn: str | None = None, pid: int | None = None) -> RoundsPath:
            prefix, description = PATHS[label]
            measure = scan_measure(connection, "cpu", fn or label, pid)
            return RoundsPath(label, prefix, description.format(auto=auto), measure)

        paths = [
            scan("ours", con, "embed_text", server.pid),
            scan("sentence_transformers", con),
            scan("onnxruntime", con),
        ]
        ratios, connections, agreement = RATIOS, [con], {}
        if auto != "float32":
            auto_server, auto_con, auto_vectors = server_connection([])
            agreement["ours_auto"] = min_cosine(auto_vectors)
            peers["sentence_transformers_auto"] = SentenceTransformersEmbedder(spec.path, threads=threads, dtype=auto)
            progress(f"cpu peers: --dtype auto is {auto} here; the same dtype on the peer's side too")
            paths += [
                scan("ours_auto", auto_con, "embed_text", auto_server.pid),
                scan("sentence_transformers_auto", con),
            ]
            ratios += AUTO_RATIOS
            connections.append(auto_con)
        for label, peer in peers.items():
            register_udf(con, label, peer, spec.dim)
            agreement[label] = min_cosine(peer.embed(sample))
        progress(f"cpu peers: min cosine to embed_text's float32 vectors on 64 rows: {agreement}")

        def load(workload: Workload) -> None:
            rows = corpus.texts(workload.rows, workload.tokens)
            for connection in connections:
                load_docs(connection, rows)

        workloads = [Workload(tokens, rows) for tokens, rows in work]
        cases = run_rounds(paths, workloads, suite="cpu", rounds=rounds, ratios=ratios, progress=progress, load=load)
    for case in cases:
        if case["path_label"] in agreement:
            case["peer_min_cosine"] = agreement[case["path_label"]]
    return cases
