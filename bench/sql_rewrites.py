"""What each call-saving SQL rewrite saves: model calls, texts sent and wall time, before and after.

For each rewrite (sql/rewrites.py) the original and the rewritten DuckDB query run on one
connection to one server, in rotating rounds (bench/rounds.py): two paths, ``original`` and
``rewritten``, one workload per rewrite. ``calls`` counts UDF invocations (chunks), ``texts_sent``
the texts that went to the server (the UDF already dedupes inside one chunk). Ratios, original /
rewritten: ``sql_rewrite_{case}_speedup`` (seconds), ``sql_rewrite_{case}_texts`` (texts sent)
and ``sql_rewrite_{case}_calls``.

The ``filtered`` case is also where short chunks cost: after a 10% filter DuckDB hands the UDF
~205-row chunks; materialized first, the rows go out in full chunks again.

    uv run --extra cpu embedtext bench --only sql-rewrites
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pyarrow as pa

SUITE = "sql-rewrites"
TOKENS = 16  # about this many per body row


def _cases() -> dict[str, tuple[str, Callable]]:
    """Workload name -> (the original query, the rewrite that saves its calls)."""
    from embedtext.sql.rewrites import dedupe_embeds, hoist_constant_embeds, materialize_filtered

    return {
        "repeated": ("SELECT id, embed_text(category) AS v FROM docs", dedupe_embeds),  # 40 distinct values
        "filtered": ("SELECT id, embed_text(body) AS v FROM docs WHERE id % 10 = 0", materialize_filtered),
        "constant": (
            "SELECT id, array_cosine_similarity(v, embed_text('how do I bake bread')) AS score "
            "FROM doc_vectors ORDER BY score DESC LIMIT 10",
            hoist_constant_embeds,
        ),
    }


def docs_table(rows: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "category": [f"category number {i % 40}" for i in range(rows)],
            "body": [f"document {i}: notes on topic {i % 97} and item {i * 7919 % 10007}" for i in range(rows)],
        }
    )


def run_sql_rewrites(target: str, rows: int, *, rounds: int, progress=print) -> list[dict]:
    import duckdb
    import sqlglot

    import embedtext
    from embedtext.bench.rounds import Ratio, RoundsPath, Workload, run_rounds

    cases = _cases()
    con = duckdb.connect()
    try:
        registration = embedtext.register(con, target)
        con.register("docs_arrow", docs_table(rows))
        con.execute("CREATE TABLE docs AS SELECT * FROM docs_arrow").fetchall()
        con.execute("CREATE TABLE doc_vectors AS SELECT id, embed_text(body) AS v FROM docs").fetchall()
        rewritten = {
            name: rewrite(sqlglot.parse_one(sql, read="duckdb")).sql("duckdb", normalize_functions=False)
            for name, (sql, rewrite) in cases.items()
        }

        def measure(rewrite: bool):
            def run(workload: Workload, warmup: bool) -> dict:
                sql = rewritten[workload.name] if rewrite else cases[workload.name][0]
                embedder = registration.embedder
                calls, sent = embedder.calls, embedder.rows_sent
                started = time.perf_counter()
                con.sql(sql).fetchall()
                return {
                    "seconds": time.perf_counter() - started,
                    "calls": embedder.calls - calls,
                    "texts_sent": embedder.rows_sent - sent,
                    "query": sql,
                }

            return run

        paths = [
            RoundsPath("original", "sql_original", "the query as written", measure(False), engine="one server"),
            RoundsPath("rewritten", "sql_rewritten", "the query after its rewrite", measure(True), engine="one server"),
        ]
        ratios = [
            Ratio("sql_rewrite_{workload}_speedup", "original", "rewritten", metric="seconds"),
            Ratio("sql_rewrite_{workload}_texts", "original", "rewritten", metric="texts_sent"),
            Ratio("sql_rewrite_{workload}_calls", "original", "rewritten", metric="calls"),
        ]
        progress(f"sql-rewrites: {rows} rows, {list(cases)}, {rounds} rounds")
        return run_rounds(
            paths,
            [Workload(TOKENS, rows, name=name) for name in cases],
            suite=SUITE,
            rounds=rounds,
            ratios=ratios,
            progress=progress,
        )
    finally:
        con.close()
