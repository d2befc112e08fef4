"""Chunks suite: long documents cut into chunks by the server (``embed_text_chunks``) against the
same chunks cut by the caller beforehand (``embed_text`` over a table of them), through one server
in rotating rounds. Both embed the same chunk texts, so the ratio of their chunk rows/s is what
the cutting costs; docs/benchmarks.md.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

import embedtext
from embedtext.bench.corpus import BenchCorpus
from embedtext.bench.measure import timed
from embedtext.bench.queries import load_docs
from embedtext.bench.rounds import Ratio, RoundsPath, Workload, run_rounds

SUITE = "chunks"


def run_chunks(
    server,
    corpus: BenchCorpus,
    *,
    docs: int,
    doc_tokens: int,
    chunk_tokens: int,
    overlap: int,
    rounds: int,
    progress=print,
) -> list[dict]:
    """``docs`` documents of ``doc_tokens`` tokens, in chunks of ``chunk_tokens`` sharing ``overlap``."""
    con = duckdb.connect()
    embedtext.register(con, server.target)
    texts = corpus.texts(docs, doc_tokens)
    load_docs(con, texts)
    chunks = embedtext.Client(server.target).split(texts, max_tokens=chunk_tokens, overlap=overlap)
    load_docs(con, pa.array(chunks.text, pa.string()), table="pre_chunks")
    progress(f"{SUITE}: {docs} documents of {doc_tokens} tokens -> {len(chunks)} chunks of at most {chunk_tokens}")
    cut_here = (
        "SELECT sum(c.embedding[1]) FROM docs, LATERAL unnest(embed_text_chunks(body, "
        f"max_tokens := {chunk_tokens}, overlap := {overlap})) AS t(c)"
    )
    cut_before = "SELECT sum(embed_text(body)[1]) FROM pre_chunks"

    def measure(query: str):
        def run(workload: Workload, warmup: bool) -> dict:
            seconds, _ = timed(lambda: con.execute(query).fetchall())
            return {"seconds": seconds, "rows": len(chunks)}

        return run

    paths = [
        RoundsPath(
            "server_split", "chunks_server_split", "embed_text_chunks over the documents", measure(cut_here), "one"
        ),
        RoundsPath(
            "pre_split", "chunks_pre_split", "embed_text over the same chunks cut before", measure(cut_before), "one"
        ),
    ]
    workload = Workload(chunk_tokens, len(chunks), kind="chunks", name=f"{doc_tokens}tok_docs")
    ratios = [Ratio("chunks_server_split_vs_pre_split", "server_split", "pre_split")]
    try:
        return run_rounds(paths, [workload], suite=SUITE, rounds=rounds, ratios=ratios, progress=progress)
    finally:
        con.close()
