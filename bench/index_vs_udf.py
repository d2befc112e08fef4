"""`embedtext index` (streamed, per-batch transactions) vs the raw `embed_text` path, same data.

    uv run --extra cpu python -m embedtext.bench.index_vs_udf --rows 50000

Both write a table of FLOAT[dim] vectors from the same rows on the same server:
  raw_udf_ctas   CREATE TABLE v AS SELECT id, embed_text(body) AS v FROM docs
  index_job      run_index(IndexSpec(db, "docs", key="id", text="body"))   (first, full run)
  index_rerun    the same job again with nothing changed (the incremental check alone)
Ratio index_vs_raw_udf = rows/s of index_job / rows/s of raw_udf_ctas (target >= 0.9).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--target", default=None, help="use a running server instead of starting one")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import duckdb

    import embedtext
    from embedtext.bench.hardware import cpu_name
    from embedtext.connectors.jobs import IndexSpec, run_index
    from embedtext.connectors.local_server import LocalServer
    from embedtext.server.synthetic_model import write_synthetic_bert

    tmp = tempfile.mkdtemp(prefix="embedtext-bench-")
    server = None
    target = args.target
    if target is None:
        source = str(write_synthetic_bert(os.path.join(tmp, "tiny"))) if args.model == "tiny" else args.model
        server = LocalServer([source], args=["--log-level", "WARNING"]).start()
        server.wait_ready(900)
        target = server.target
    try:
        db = os.path.join(tmp, "bench.duckdb")
        con = duckdb.connect(db)
        con.execute(
            f"CREATE TABLE docs AS SELECT i AS id, 'row ' || i || ' ' || repeat('the cat and the bank ', 8) AS body "
            f"FROM range({args.rows}) t(i)"
        ).fetchall()
        embedtext.register(con, target)
        con.execute("SELECT sum(embed_text(body)[1]) FROM (SELECT body FROM docs LIMIT 2048)").fetchall()
        t0 = time.perf_counter()
        con.execute("CREATE TABLE v AS SELECT id, embed_text(body) AS v FROM docs").fetchall()
        raw = time.perf_counter() - t0
        con.close()
        spec = IndexSpec(db, "docs", key="id", text="body", target=target)
        job = run_index(spec, log=lambda _: None)
        rerun = run_index(spec, log=lambda _: None)
    finally:
        if server is not None:
            server.stop()
    cases = [
        {"name": "raw_udf_ctas", "rows": args.rows, "seconds": round(raw, 2), "rows_per_s": round(args.rows / raw, 1)},
        {
            "name": "index_job",
            "rows": job.embedded,
            "seconds": round(job.seconds, 2),
            "rows_per_s": round(job.embedded / job.seconds, 1),
        },
        {"name": "index_rerun", "rows": rerun.embedded, "seconds": round(rerun.seconds, 2), "rows_per_s": None},
    ]
    ratio = round(cases[1]["rows_per_s"] / cases[0]["rows_per_s"], 3)
    print(f"hardware: {cpu_name()}, {os.cpu_count()} cores")
    print(f"{'case':14} {'rows':>8} {'seconds':>8} {'rows/s':>9}")
    for c in cases:
        print(f"{c['name']:14} {c['rows']:>8} {c['seconds']:>8.2f} {c['rows_per_s'] or '-':>9}")
    print(f"index_vs_raw_udf {ratio}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"cases": cases, "ratios": {"index_vs_raw_udf": ratio}}, fh, indent=1)


if __name__ == "__main__":
    main()
