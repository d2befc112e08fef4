"""What each call-saving SQL rewrite saves: model calls, texts sent and wall time, before and after.

    uv run --extra cpu python -m embedtext.bench.sql_rewrites --target unix:/tmp/embedtext.sock [--rows 20000]

Needs a running ``embedtext serve`` (any model). For each case the original and the rewritten
DuckDB query run on the same connection, alternating, ``--repeat`` times each; the table shows
medians. ``calls`` counts UDF invocations (chunks), ``texts sent`` the distinct texts that went to
the server (the UDF already dedupes inside one chunk).
"""

from __future__ import annotations

import argparse
import statistics
import time

import duckdb
import pyarrow as pa
import sqlglot

import embedtext
from embedtext.sql.rewrites import dedupe_embeds, hoist_constant_embeds, materialize_filtered

CASES = [
    (
        "repeated values (category, 40 distinct)",
        "SELECT id, embed_text(category) AS v FROM docs",
        dedupe_embeds,
    ),
    (
        "filtered scan (10% of rows)",
        "SELECT id, embed_text(body) AS v FROM docs WHERE id % 10 = 0",
        materialize_filtered,
    ),
    (
        "constant embed (search query)",
        "SELECT id, array_cosine_similarity(v, embed_text('how do I bake bread')) AS score "
        "FROM doc_vectors ORDER BY score DESC LIMIT 10",
        hoist_constant_embeds,
    ),
]


def run(con, reg, sql: str) -> tuple[int, int, float]:
    calls, sent = reg.embedder.calls, reg.embedder.rows_sent
    start = time.perf_counter()
    con.sql(sql).fetchall()
    return reg.embedder.calls - calls, reg.embedder.rows_sent - sent, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    con = duckdb.connect()
    reg = embedtext.register(con, args.target)
    n = args.rows
    docs = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "category": [f"category number {i % 40}" for i in range(n)],
            "body": [f"document {i}: notes on topic {i % 97} and item {i * 7919 % 10007}" for i in range(n)],
        }
    )
    con.register("docs_arrow", docs)
    con.execute("CREATE TABLE docs AS SELECT * FROM docs_arrow").fetchall()
    con.execute("CREATE TABLE doc_vectors AS SELECT id, embed_text(body) AS v FROM docs").fetchall()

    rows = []
    for label, sql, rewrite in CASES:
        rewritten = rewrite(sqlglot.parse_one(sql, read="duckdb")).sql("duckdb", normalize_functions=False)
        before, after = [], []
        for _ in range(args.repeat):
            before.append(run(con, reg, sql))
            after.append(run(con, reg, rewritten))
        b = [statistics.median(x) for x in zip(*before)]
        a = [statistics.median(x) for x in zip(*after)]
        rows.append((label, rewrite.__name__, b, a))

    print(f"{n} rows, model {reg.model} (dim {reg.dim}), medians of {args.repeat}")
    head = f"{'case':40} {'rewrite':22} {'calls':>13} {'texts sent':>15} {'seconds':>15} {'time ratio':>10}"
    print(head)
    print("-" * len(head))
    for label, name, b, a in rows:
        ratio = b[2] / a[2] if a[2] else float("nan")
        print(
            f"{label:40} {name:22} {int(b[0]):>6} -> {int(a[0]):<4} {int(b[1]):>7} -> {int(a[1]):<5} "
            f"{b[2]:>6.3f} -> {a[2]:<6.3f} {ratio:>9.2f}x"
        )


if __name__ == "__main__":
    main()
