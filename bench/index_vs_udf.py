"""``embedtext index`` (streamed, per-batch transactions) vs the raw ``embed_text`` path, same rows.

Two paths on one server, in rotating rounds (bench/rounds.py), each writing a new table of
FLOAT[dim] vectors from the same ``docs`` table every run:

  index_job_{T}tok  ``run_index(IndexSpec(db, "docs", key="id", text="body", into=...))``: a first,
                    full run; then the same job again with nothing changed (``rerun_s``: the
                    incremental check alone)
  raw_udf_{T}tok    ``CREATE TABLE v AS SELECT id, embed_text(body) AS v FROM docs``

Ratio ``index_vs_raw_udf``: rows/s of the job over the raw path's (target >= 0.9).

    uv run --extra cpu embedtext bench --only index-vs-udf
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

SUITE = "index-vs-udf"
TOKENS = 20  # 'row N ' and eight 'the cat and the bank'


def run_index_vs_udf(target: str, rows: int, workdir: Path, *, rounds: int, progress=print) -> list[dict]:
    import duckdb

    import embedtext
    from embedtext.bench.rounds import Ratio, RoundsPath, Workload, run_rounds
    from embedtext.connectors.jobs import IndexSpec, run_index

    db = str(workdir / "index_vs_udf.duckdb")
    with duckdb.connect(db) as con:
        con.execute(
            "CREATE OR REPLACE TABLE docs AS SELECT i AS id, 'row ' || i || ' ' || repeat('the cat and the bank ', 8) "
            f"AS body FROM range({rows}) t(i)"
        ).fetchall()
    runs = itertools.count()

    def warm_up() -> None:
        with duckdb.connect(db) as con:
            embedtext.register(con, target)
            con.execute("SELECT sum(embed_text(body)[1]) FROM (SELECT body FROM docs LIMIT 2048)").fetchall()

    def raw(workload: Workload, warmup: bool) -> dict:
        if warmup:
            warm_up()
        with duckdb.connect(db) as con:
            embedtext.register(con, target)
            table = f"raw_{next(runs)}"
            started = time.perf_counter()
            con.execute(f"CREATE TABLE {table} AS SELECT id, embed_text(body) AS v FROM docs").fetchall()
            seconds = time.perf_counter() - started
            con.execute(f"DROP TABLE {table}").fetchall()
            return {"seconds": seconds}

    def job(workload: Workload, warmup: bool) -> dict:
        if warmup:
            warm_up()
        spec = IndexSpec(db, "docs", key="id", text="body", target=target, into=f"indexed_{next(runs)}")
        first = run_index(spec, log=lambda _: None)
        rerun = run_index(spec, log=lambda _: None)
        return {"seconds": first.seconds, "rows": first.embedded, "rerun_s": round(rerun.seconds, 3)}

    paths = [
        RoundsPath("index_job", "index_job", "embedtext index (run_index), a full first run", job, engine="one server"),
        RoundsPath("raw_udf", "raw_udf", "CREATE TABLE AS SELECT embed_text(body)", raw, engine="one server"),
    ]
    progress(f"index-vs-udf: {rows} rows, {rounds} rounds")
    return run_rounds(
        paths,
        [Workload(TOKENS, rows)],
        suite=SUITE,
        rounds=rounds,
        ratios=[Ratio("index_vs_raw_udf", "index_job", "raw_udf")],
        progress=progress,
    )
