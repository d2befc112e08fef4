"""The main job of the README: embed a table in DuckDB with ``embed_text`` and search it.

1. load the demo corpus (paragraphs of the standard library's docstrings) into a DuckDB table
   ``docs(id, source, body)``;
2. ``CREATE TABLE doc_vectors AS SELECT id, embed_text(body) AS v FROM docs`` (progress bar);
3. run a few semantic searches with the shipped ``embed_text_search`` macro and print the hits.
"""

from __future__ import annotations

import sys
import time

import click
import duckdb
import pyarrow as pa

from embedtext.corpus import docstring_corpus

# Questions a user would ask, worded unlike the docstrings that answer them.
SEARCHES = [
    "copy a whole directory tree",
    "send an email message through a mail server",
    "find the differences between two texts",
    "generate a random password",
]
SHOWN_CHARS = 110


def run_demo(target: str | None = None, rows: int | None = None, database: str = ":memory:", top: int = 3) -> dict:
    """Run the job on ``rows`` paragraphs (all when None); returns {query: [(source, body, score), ...]}."""
    from tqdm import tqdm

    from embedtext.udf import register

    con = duckdb.connect(database)
    con.register("corpus", pa.table(docstring_corpus(rows)))
    # duckdb 2.0 refuses new work while a result is unfinished: fetch every result to the end.
    con.execute("CREATE OR REPLACE TABLE docs AS SELECT * FROM corpus").fetchall()
    n = con.execute("SELECT count(*) FROM docs").fetchall()[0][0]

    bar = None
    # register() may start the co-deployed server first (about a minute): the bar starts after it,
    # so its rate and ETA are the embedding's, not the start-up's.
    registration = register(con, target, on_rows=lambda rows: bar.update(rows))
    click.echo(f"embedding {n} rows with {registration.model} (FLOAT[{registration.dim}]) via {registration.target}")
    # On a terminal a live bar; in a log, a line every few seconds.
    bar = tqdm(total=n, unit="rows", desc="embed_text", file=sys.stderr, mininterval=0.2 if sys.stderr.isatty() else 5)
    started = time.perf_counter()
    con.execute("CREATE OR REPLACE TABLE doc_vectors AS SELECT id, embed_text(body) AS v FROM docs").fetchall()
    elapsed = time.perf_counter() - started
    bar.close()
    stored = con.execute("SELECT count(*), any_value(typeof(v)) FROM doc_vectors").fetchall()[0]
    click.echo(f"doc_vectors: {stored[0]} rows of {stored[1]} in {elapsed:.1f} s ({n / elapsed:,.0f} rows/s)")

    hits = {}
    for query in SEARCHES:
        found = con.execute(
            "SELECT d.source, d.body, s.score FROM embed_text_search('doc_vectors', 'v', ?, k := ?) s "
            "JOIN docs d USING (id) ORDER BY s.score DESC",
            [query, top],
        ).fetchall()
        hits[query] = found
        click.echo(f"\nsearch: {query!r}")
        for source, body, score in found:
            shown = body if len(body) <= SHOWN_CHARS else body[: SHOWN_CHARS - 1].rstrip() + "…"
            click.echo(f"  {score:.3f}  [{source}] {shown}")
    con.close()
    return hits
