"""DuckDB ``SELECT embed_text(body)`` end to end vs in-process ``LLM.embed`` on token ids.

Same machine, same model, same rows, one run; prints a table and the ratios
(these machines are noisy: compare within a run, not across runs).

    uv run --extra cpu python bench/udf_vs_inprocess.py --rows 100000            # tiny generated BERT
    uv run --extra cpu python bench/udf_vs_inprocess.py --rows 5000 --model default  # all-MiniLM-L6-v2

Cases:
  udf_full_chunks      SELECT sum(embed_text(body)[1]) FROM docs          (2048-row chunks)
  udf_filtered_chunks  ... WHERE id % 10 = 0 over the same table          (~205-row chunks)
  udf_materialized     the same filter materialized first (TEMP TABLE), then embedded
  inprocess_llm_embed  vllm.LLM.embed on pre-tokenized ids (the ceiling; no server, no DuckDB)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


def make_texts(rows: int, words: int, vocab: list[str], seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(vocab, k=words)) for _ in range(rows)]


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--tokens", type=int, default=50, help="tokens per row, special tokens included")
    parser.add_argument("--model", default="tiny", help="'tiny' (generated 2-layer BERT) or a model source")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import duckdb
    import pyarrow as pa
    from tokenizers import Tokenizer

    import embedtext
    from embedtext.connectors.local_server import LocalServer
    from embedtext.server.models import load_model_spec
    from embedtext.server.synthetic_model import _WORDS, write_synthetic_bert
    from bench_common import cpu_name  # noqa: I001

    tmp = tempfile.mkdtemp(prefix="embedtext-bench-")
    source = str(write_synthetic_bert(os.path.join(tmp, "tiny"))) if args.model == "tiny" else args.model
    spec = load_model_spec(source)
    tokenizer = Tokenizer.from_file(str(spec.tokenizer_file))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    vocab = [w for w in _WORDS if len(tokenizer.encode(w, add_special_tokens=False).ids) == 1]
    texts = make_texts(args.rows, args.tokens - 2, vocab)
    ids = [e.ids for e in tokenizer.encode_batch(texts)]
    tokens = sum(len(i) for i in ids)
    print(f"{args.rows} rows, {tokens / args.rows:.1f} tokens/row, model {spec.name} ({spec.dim}-d)")

    cases = []

    def case(name, rows, seconds, **extra):
        cases.append({"name": name, "rows": rows, "seconds": round(seconds, 3),
                      "rows_per_s": round(rows / seconds, 1),
                      "tokens_per_s": round(rows / seconds * tokens / args.rows, 1), **extra})

    # --- DuckDB + embedtext server ---------------------------------------------------------
    server = LocalServer([source], args=["--log-level", "WARNING"])
    server.start()
    server.wait_ready(900)
    try:
        con = duckdb.connect()
        embedtext.register(con, server.target)
        docs_arrow = pa.table({"id": list(range(args.rows)), "body": texts})
        con.execute("CREATE TABLE docs AS SELECT * FROM docs_arrow").fetchall()
        con.execute("SELECT sum(embed_text(body)[1]) FROM (SELECT * FROM docs LIMIT 2048)").fetchall()  # warm-up
        seconds, _ = timed(lambda: con.execute("SELECT sum(embed_text(body)[1]) FROM docs").fetchall())
        case("udf_full_chunks", args.rows, seconds)
        filtered = con.execute("SELECT count(*) FROM docs WHERE id % 10 = 0").fetchall()[0][0]
        seconds, _ = timed(lambda: con.execute(
            "SELECT sum(embed_text(body)[1]) FROM docs WHERE id % 10 = 0").fetchall())
        case("udf_filtered_chunks", filtered, seconds)
        seconds, _ = timed(lambda: (
            con.execute("CREATE OR REPLACE TEMP TABLE f AS SELECT * FROM docs WHERE id % 10 = 0").fetchall(),
            con.execute("SELECT sum(embed_text(body)[1]) FROM f").fetchall()))
        case("udf_materialized", filtered, seconds)
        con.close()
    finally:
        server.stop()

    # --- in-process vLLM, the ceiling --------------------------------------------------------
    from vllm import LLM
    from vllm.inputs import tokens_input

    llm = LLM(model=str(spec.path), runner="pooling", convert="embed", dtype="float32",
              gpu_memory_utilization=0.2, max_model_len=spec.max_tokens, disable_log_stats=True)
    prompts = [tokens_input(i) for i in ids]
    llm.embed(prompts[:2048], use_tqdm=False)  # warm-up
    seconds, _ = timed(lambda: llm.embed(prompts, use_tqdm=False))
    case("inprocess_llm_embed", args.rows, seconds)

    by = {c["name"]: c for c in cases}
    ratios = {
        "udf_vs_inprocess": round(by["udf_full_chunks"]["rows_per_s"] / by["inprocess_llm_embed"]["rows_per_s"], 3),
        "filtered_vs_full_chunks": round(by["udf_filtered_chunks"]["rows_per_s"] / by["udf_full_chunks"]["rows_per_s"], 3),
        "materialized_vs_filtered": round(by["udf_materialized"]["rows_per_s"] / by["udf_filtered_chunks"]["rows_per_s"], 3),
    }
    hardware = f"{cpu_name()}, {os.cpu_count()} cores, {platform.platform()}"
    print(f"\nhardware: {hardware}")
    print(f"{'case':24} {'rows':>8} {'seconds':>9} {'rows/s':>10} {'tokens/s':>11}")
    for c in cases:
        print(f"{c['name']:24} {c['rows']:>8} {c['seconds']:>9.2f} {c['rows_per_s']:>10.1f} {c['tokens_per_s']:>11.0f}")
    for k, v in ratios.items():
        print(f"{k:32} {v:.3f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"hardware": hardware, "cases": cases, "ratios": ratios}, fh, indent=1)


if __name__ == "__main__":
    main()
