"""Incremental, resumable indexing jobs on real DuckDB files against a real server."""

import os
import signal
import subprocess
import sys

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from server_metrics import summed, wait_for_metrics

import embedtext
from embedtext.connectors.jobs import IndexSpec, run_index


def _sql(db, *statements):
    con = duckdb.connect(str(db))
    try:
        out = None
        for s in statements:
            out = con.execute(s).fetchall()
        return out
    finally:
        con.close()


def _make_docs(db, rows=3000):
    _sql(
        db,
        f"CREATE OR REPLACE TABLE docs AS SELECT i AS id, 'the cat and the bank ' || i AS body, i % 3 AS other "
        f"FROM range({rows}) t(i)",
    )


def _index(db, servers, lines=None, **kw):
    spec = IndexSpec(str(db), kw.pop("source", "docs"), key="id", text="body", target=servers.tiny.target, **kw)
    return run_index(spec, log=(lines.append if lines is not None else lambda _: None))


def _rows_served(metrics) -> float:
    return summed(metrics(), "embedtext_rows_total")


def _wait_rows_served(metrics, at_least: float, proc) -> None:
    """Wait until the server has embedded ``at_least`` rows (its Prometheus counter), while ``proc`` runs."""

    def job_running() -> None:
        assert proc.poll() is None, "the job ended before the server embedded its first batches"

    wait_for_metrics(
        metrics,
        lambda m: summed(m, "embedtext_rows_total") >= at_least,
        f"the server embedded {at_least} rows",
        timeout_s=300,
        meanwhile=job_running,
    )


# A job is stopped once the server has embedded this many batches of it: with one batch embedding
# while the one before is written, request k leaves only after batch k-2 committed.
BATCHES_BEFORE_KILL = 8


def _table(db, name="docs_embeddings"):
    return _sql(db, f"SELECT key, content_hash, model, dimensions, embedding FROM {name} ORDER BY key")


def test_first_run_embeds_all_then_nothing(tmp_path, servers, tiny_client):
    db = tmp_path / "a.duckdb"
    _make_docs(db)
    lines = []
    first = _index(db, servers, lines)
    assert (first.embedded, first.removed, first.failed, first.error) == (3000, 0, 0, None)
    assert lines[-1] == first.line and first.line.startswith("3000 rows embedded, 0 removed, 0 failed in ")
    again = _index(db, servers)
    assert (again.embedded, again.removed, again.failed) == (0, 0, 0)
    rows = _table(db)
    assert len(rows) == 3000 and {r[2] for r in rows} == {"tiny"} and {r[3] for r in rows} == {128}
    expected = tiny_client.embed([f"the cat and the bank {i}" for i in range(0, 3000, 250)])
    np.testing.assert_allclose(np.array([rows[i][4] for i in range(0, 3000, 250)]), expected, atol=1e-5)


def test_only_changed_rows_are_embedded(tmp_path, servers):
    db = tmp_path / "b.duckdb"
    _make_docs(db, 500)
    _index(db, servers)
    before = {r[0]: r for r in _table(db)}
    _sql(
        db,
        "UPDATE docs SET body = body || ' edited' WHERE id < 3",
        "UPDATE docs SET other = 42 WHERE id BETWEEN 10 AND 20",  # unrelated column: no re-embedding
        "DELETE FROM docs WHERE id = 400",
        "INSERT INTO docs VALUES (1001, 'a new row', 0), (1002, NULL, 0), (1003, '   ', 0)",
        "UPDATE docs SET body = NULL WHERE id = 300",
    )
    summary = _index(db, servers)
    assert (summary.embedded, summary.removed, summary.failed) == (4, 2, 0)
    after = {r[0]: r for r in _table(db)}
    assert set(after) == (set(before) - {400, 300}) | {1001}
    assert all(after[k] == before[k] for k in range(10, 21))
    assert all(after[k][1] != before[k][1] for k in range(3))


def test_changing_dimensions_or_model_reembeds_everything(tmp_path, servers, tiny_client):
    db = tmp_path / "c.duckdb"
    _make_docs(db, 300)
    _index(db, servers)
    summary = _index(db, servers, dimensions=32)
    assert summary.embedded == 300
    assert _sql(db, "SELECT DISTINCT typeof(embedding), dimensions FROM docs_embeddings") == [("FLOAT[32]", 32)]
    row = _sql(db, "SELECT embedding FROM docs_embeddings WHERE key = 7")[0][0]
    np.testing.assert_allclose(row, tiny_client.embed(["the cat and the bank 7"], dimensions=32)[0], atol=1e-5)
    assert _index(db, servers, dimensions=32).embedded == 0


def test_parquet_glob_and_query_sources(tmp_path, servers):
    data = tmp_path / "data"
    data.mkdir()
    for part in range(3):
        ids = list(range(part * 100, part * 100 + 100))
        pq.write_table(pa.table({"id": ids, "body": [f"row {i} of the river" for i in ids]}), data / f"p{part}.parquet")
    db = tmp_path / "d.duckdb"
    s1 = _index(db, servers, source=str(data / "*.parquet"), into="parquet_vectors")
    assert s1.embedded == 300 and len(_table(db, "parquet_vectors")) == 300
    _make_docs(db, 50)
    s2 = _index(db, servers, source="SELECT id, body FROM docs WHERE other = 0", into="subset_vectors")
    assert s2.embedded == 17


def test_kill_9_mid_run_loses_nothing_and_rerun_matches_clean_run(tmp_path, servers):
    db, clean = tmp_path / "killed.duckdb", tmp_path / "clean.duckdb"
    for d in (db, clean):
        _make_docs(d, 20000)
    cmd = [
        sys.executable,
        "-m",
        "embedtext.cli",
        "index",
        str(db),
        "--table",
        "docs",
        "--key",
        "id",
        "--text",
        "body",
        "--target",
        servers.tiny.target,
        "--batch-rows",
        "256",
    ]
    before = _rows_served(servers.tiny_metrics)
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    assert "rows to embed" in proc.stderr.readline()
    _wait_rows_served(servers.tiny_metrics, before + BATCHES_BEFORE_KILL * 256, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    committed = _sql(db, "SELECT count(*) FROM docs_embeddings")[0][0]
    assert (BATCHES_BEFORE_KILL - 2) * 256 <= committed < 20000
    assert committed % 256 == 0  # only whole batches
    resumed = _index(db, servers)
    assert resumed.embedded == 20000 - committed
    _index(clean, servers)
    killed_rows, clean_rows = _table(db), _table(clean)
    assert [r[:4] for r in killed_rows] == [r[:4] for r in clean_rows]
    np.testing.assert_allclose(np.array([r[4] for r in killed_rows]), np.array([r[4] for r in clean_rows]), atol=1e-5)


def test_second_run_while_one_is_active_gets_a_clear_message(tmp_path, servers):
    db = tmp_path / "e.duckdb"
    _make_docs(db, 20000)
    cmd = [
        sys.executable,
        "-m",
        "embedtext.cli",
        "index",
        str(db),
        "--table",
        "docs",
        "--key",
        "id",
        "--text",
        "body",
        "--target",
        servers.tiny.target,
    ]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    try:
        assert "rows to embed" in proc.stderr.readline()
        lines = []
        summary = _index(db, servers, lines)
        assert summary.error and "in use by another process" in summary.error
        assert lines[-1] == summary.line
    finally:
        proc.kill()
        proc.wait()


def test_rows_that_keep_failing_go_to_the_failed_table_and_are_retried(tmp_path, servers):
    db = tmp_path / "f.duckdb"
    _make_docs(db, 100)
    _sql(db, "UPDATE docs SET body = repeat('word ', 300) WHERE id IN (5, 50)")
    first = _index(db, servers, truncate=False)
    assert (first.embedded, first.failed) == (98, 2)
    failed = _sql(db, "SELECT key, attempts, error FROM docs_embeddings_failed ORDER BY key")
    assert [(k, a) for k, a, _ in failed] == [(5, 1), (50, 1)]
    assert "truncation is off" in failed[0][2]
    second = _index(db, servers, truncate=False)
    assert (second.embedded, second.failed) == (0, 2)
    assert _sql(db, "SELECT key, attempts FROM docs_embeddings_failed ORDER BY key") == [(5, 2), (50, 2)]
    _sql(db, "UPDATE docs SET body = 'short again' WHERE id = 5")
    third = _index(db, servers, truncate=False)
    assert (third.embedded, third.failed) == (1, 1)
    assert _sql(db, "SELECT key FROM docs_embeddings_failed") == [(50,)]


def test_dead_server_is_retried_then_reported(tmp_path):
    db = tmp_path / "g.duckdb"
    _make_docs(db, 10)
    lines = []
    spec = IndexSpec(str(db), "docs", key="id", text="body", target="unix:/nonexistent/x.sock", retries=1)
    summary = run_index(spec, log=lines.append)
    assert summary.error and "/nonexistent/x.sock" in summary.error
    assert lines[-1] == "0 rows embedded, 0 removed, 0 failed in " + lines[-1].split(" in ")[1]


@pytest.mark.parametrize("every, seconds", [("10m", 600), ("1h30m", 5400), ("90s", 90)])
def test_every_parsing(every, seconds):
    from embedtext.connectors.jobs.schedule import parse_every

    assert parse_every(every) == seconds


def test_ray_data_run_gives_the_same_table_as_a_local_run(tmp_path, servers):
    local, on_ray = tmp_path / "local.duckdb", tmp_path / "ray.duckdb"
    for d in (local, on_ray):
        _make_docs(d, 3000)
        _sql(d, "UPDATE docs SET body = repeat('word ', 300) WHERE id = 77")
    _index(local, servers, truncate=False)
    # Through the CLI, in a process of its own, as users run it: Ray starts its cluster processes
    # from there, not from this test process with its many gRPC channels and servers.
    cmd = [
        sys.executable,
        "-m",
        "embedtext.cli",
        "index",
        str(on_ray),
        "--table",
        "docs",
        "--key",
        "id",
        "--text",
        "body",
        "--target",
        f"{servers.tiny.target},{servers.tiny.target}",
        "--batch-rows",
        "500",
        "--no-truncate",
        "--engine",
        "ray",
        "--workers",
        "2",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}

    def summary_line(out: subprocess.CompletedProcess) -> str:  # the job's last line, on stderr
        lines = [line for line in out.stderr.splitlines() if " rows embedded, " in line]
        return lines[-1] if lines else out.stderr[-3000:]

    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0 and summary_line(done).startswith("2999 rows embedded, 0 removed, 1 failed in "), (
        summary_line(done)
    )
    a, b = _table(local), _table(on_ray)
    assert [r[:4] for r in a] == [r[:4] for r in b]
    np.testing.assert_allclose(np.array([r[4] for r in a]), np.array([r[4] for r in b]), atol=1e-5)
    assert _sql(on_ray, "SELECT key FROM docs_embeddings_failed") == [(77,)]
    # The Ray pass recorded every row as a local pass does: a rerun finds nothing to do (local, as
    # the state is the same whatever embedded the rows; a Ray cluster's start costs a minute on 2 cores).
    again = subprocess.run(cmd[: cmd.index("--engine")], capture_output=True, text=True, timeout=600, env=env)
    assert again.returncode == 0 and summary_line(again).startswith("0 rows embedded"), summary_line(again)


@pytest.mark.slow
def test_server_killed_mid_index_then_rerun_matches_clean_run(tmp_path, guarded, servers):
    """kill -9 of the server and its engine during `embedtext index` (reaching it through
    EMBEDTEXT_TOKEN and EMBEDTEXT_TLS_*): the job stops with its summary line; the rerun
    (on another server of the same model) ends identical to a clean run: 0 rows lost or doubled."""
    db, clean = tmp_path / "victim.duckdb", tmp_path / "clean.duckdb"
    for d in (db, clean):
        _make_docs(d, 20000)
    cmd = [
        sys.executable,
        "-m",
        "embedtext.cli",
        "index",
        str(db),
        "--table",
        "docs",
        "--key",
        "id",
        "--text",
        "body",
        "--target",
        guarded.target,
        "--batch-rows",
        "256",
        "--retries",
        "1",  # one retry shows the job retrying; each waits 5 s for the dead server
    ]
    before = _rows_served(guarded.metrics)
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env={**os.environ, **guarded.client_env()})
    assert "rows to embed" in proc.stderr.readline()
    _wait_rows_served(guarded.metrics, before + BATCHES_BEFORE_KILL * 256, proc)
    guarded.freeze()  # the job cannot finish now, whatever the time from here to the kill
    assert proc.poll() is None, "the job finished before its server could be killed"
    guarded.kill()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    lines = err.strip().splitlines()
    assert lines[-2].startswith("error: ") and " rows embedded, 0 removed, 0 failed in " in lines[-1]
    committed = int(lines[-1].split()[0])
    assert (BATCHES_BEFORE_KILL - 2) * 256 <= committed < 20000
    assert _sql(db, "SELECT count(*) FROM docs_embeddings")[0][0] == committed

    resumed = _index(db, servers)
    assert (resumed.embedded, resumed.error) == (20000 - committed, None)
    _index(clean, servers)
    a, b = _table(db), _table(clean)
    assert [r[:4] for r in a] == [r[:4] for r in b]  # same keys, hashes, model, dims: none lost or doubled
    np.testing.assert_allclose(np.array([r[4] for r in a]), np.array([r[4] for r in b]), atol=1e-5)


# --- chunk tables (--chunk-tokens) ---------------------------------------------------------------


def _make_long_docs(db, rows):
    """Documents of one to about four 40-token chunks, each a different text."""
    _sql(
        db,
        "CREATE OR REPLACE TABLE docs AS SELECT i AS id, "
        "repeat('the cat and the bank ' || i || '. ', 1 + i % 13) AS body, 0 AS other FROM range("
        f"{rows}) t(i)",
    )


def _chunk_table(db, name="docs_chunks"):
    return _sql(
        db,
        f"SELECT key, chunk_index, content_hash, model, dimensions, char_start, char_end, text, embedding, indexed_at "
        f"FROM {name} ORDER BY key, chunk_index",
    )


def _expected_chunks(db, client, keys, **kw):
    """What the job's rows for ``keys`` must hold: the client's chunks of their texts."""
    bodies = dict(_sql(db, f"SELECT id, body FROM docs WHERE id IN ({', '.join(map(str, keys))})"))
    keys = sorted(bodies)
    chunks = client.embed_chunks([bodies[k] for k in keys], **kw)
    rows = [
        (keys[r], i, s, e, t)
        for r, i, s, e, t in zip(chunks.row.tolist(), chunks.index.tolist(), chunks.start, chunks.end, chunks.text)
    ]
    return rows, chunks.vectors


def test_a_chunk_job_keeps_a_row_per_chunk_and_re_embeds_only_changed_texts(tmp_path, servers, tiny_client):
    db = tmp_path / "chunks.duckdb"
    _make_long_docs(db, 300)
    first = _index(db, servers, chunk_tokens=40, overlap=8)
    assert (first.embedded, first.removed, first.failed, first.error) == (300, 0, 0, None)
    table = _chunk_table(db)
    want, vectors = _expected_chunks(db, tiny_client, range(300), max_tokens=40, overlap=8)
    assert [(r[0], r[1], int(r[5]), int(r[6]), r[7]) for r in table] == [
        (k, i, int(s), int(e), t) for k, i, s, e, t in want
    ]
    assert len(table) > 600 and {r[3] for r in table} == {"tiny"}
    np.testing.assert_allclose(np.array([r[8] for r in table]), vectors, atol=1e-5)
    assert _index(db, servers, chunk_tokens=40, overlap=8).embedded == 0

    _sql(
        db,
        "UPDATE docs SET body = body || ' Edited at the end.' WHERE id IN (5, 6)",
        "UPDATE docs SET body = 'now short' WHERE id = 7",
        "DELETE FROM docs WHERE id = 8",
        "UPDATE docs SET body = NULL WHERE id = 9",
        "INSERT INTO docs VALUES (1000, repeat('a new document here. ', 9), 0)",
    )
    again = _index(db, servers, chunk_tokens=40, overlap=8)
    assert (again.embedded, again.removed, again.failed) == (4, 2, 0)
    after = _chunk_table(db)
    before_by_key = {}
    for row in table:
        before_by_key.setdefault(row[0], []).append(row)
    after_by_key = {}
    for row in after:
        after_by_key.setdefault(row[0], []).append(row)
    assert set(after_by_key) == (set(before_by_key) - {8, 9}) | {1000}
    unchanged = set(before_by_key) - {5, 6, 7, 8, 9}
    assert all(after_by_key[k] == before_by_key[k] for k in unchanged)  # not one of their rows rewritten
    want, vectors = _expected_chunks(db, tiny_client, [5, 6, 7, 1000], max_tokens=40, overlap=8)
    changed = [r for k in (5, 6, 7, 1000) for r in after_by_key[k]]
    assert [(r[0], r[1], int(r[5]), int(r[6]), r[7]) for r in changed] == [
        (k, i, int(s), int(e), t) for k, i, s, e, t in want
    ]
    np.testing.assert_allclose(np.array([r[8] for r in changed]), vectors, atol=1e-5)
    assert len(after_by_key[7]) == 1 and after_by_key[7][0][7] == "now short"
    # Another chunk size is another embedding of every text.
    assert _index(db, servers, chunk_tokens=32, overlap=4).embedded == 299


def test_kill_9_mid_chunk_job_leaves_whole_documents_and_rerun_matches_clean_run(tmp_path, servers):
    db, clean = tmp_path / "killed-chunks.duckdb", tmp_path / "clean-chunks.duckdb"
    for d in (db, clean):
        _make_long_docs(d, 3000)
    args = ["--chunk-tokens", "40", "--overlap", "8", "--batch-rows", "128"]
    cmd = [sys.executable, "-m", "embedtext.cli", "index", str(db), "--table", "docs", "--key", "id"]
    cmd += ["--text", "body", "--target", servers.tiny.target, *args]
    before = _rows_served(servers.tiny_metrics)
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    assert "rows to embed" in proc.stderr.readline()
    # The server counts chunks (about 2.3 a document): this is some 10 batches of documents.
    _wait_rows_served(servers.tiny_metrics, before + BATCHES_BEFORE_KILL * 128 * 3, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    keys = _sql(db, "SELECT count(DISTINCT key) FROM docs_chunks")[0][0]
    assert 0 < keys < 3000 and keys % 128 == 0  # only whole batches of documents
    resumed = _index(db, servers, chunk_tokens=40, overlap=8, batch_rows=128)
    assert resumed.embedded == 3000 - keys
    _index(clean, servers, chunk_tokens=40, overlap=8)
    a, b = _chunk_table(db), _chunk_table(clean)
    assert [r[:8] for r in a] == [r[:8] for r in b]  # every document's chunks whole, none lost or doubled
    np.testing.assert_allclose(np.array([r[8] for r in a]), np.array([r[8] for r in b]), atol=1e-5)


def test_ray_workers_give_a_chunk_job_the_local_table(tmp_path, servers):
    """The Ray path's own code on a chunked job, without a Ray cluster (its start costs a minute on
    2 cores; the cluster itself is tested above): the worker's output rows, committed by the driver's
    commit, give the same chunk table as a local pass, refused texts included."""
    from embedtext.connectors import ray as ray_runner
    from embedtext.connectors.jobs.runner import IndexSummary, run_pass

    local, on_ray = tmp_path / "local-chunks.duckdb", tmp_path / "ray-chunks.duckdb"
    for d in (local, on_ray):
        _make_long_docs(d, 400)
        _sql(d, "UPDATE docs SET body = '' WHERE id = 3")  # no text: no chunks, not pending
    _index(local, servers, chunk_tokens=40, overlap=8, prompt_name=None)
    spec = IndexSpec(str(on_ray), "docs", key="id", text="body", target=servers.tiny.target, chunk_tokens=40, overlap=8)

    def embed_with_workers(con, state, client, total, summary: IndexSummary, log) -> None:
        worker = ray_runner.EmbedBatchWorker(spec)
        reader = con.cursor().sql(state.pending_sql()).to_arrow_reader(150)
        for batch in reader:
            out = worker(pa.Table.from_batches([batch]))
            ray_runner._commit_ray_chunks(state, out, state.dim, summary)

    summary = run_pass(spec, embed_with_workers, log=lambda _: None)
    assert (summary.embedded, summary.failed, summary.error) == (399, 0, None)
    a, b = _chunk_table(local), _chunk_table(on_ray)
    assert [r[:8] for r in a] == [r[:8] for r in b]
    np.testing.assert_allclose(np.array([r[8] for r in a]), np.array([r[8] for r in b]), atol=1e-5)


def test_a_ray_worker_embeds_with_the_jobs_prompt(tmp_path, arctic_server):
    """A job's prompt reaches the Ray workers' calls (the arctic-like model has a query prompt): a
    worker's vectors are the client's with that prompt, plain and in chunks."""
    from embedtext.connectors import ray as ray_runner

    texts = ["a river bank", "the bank raised its rates. " * 30]
    batch = pa.table({"key": [1, 2], "text": texts, "content_hash": ["h1", "h2"]})
    with embedtext.Client(arctic_server.target) as client:
        want = client.embed(texts, prompt_name="query")
        want_chunks = client.embed_chunks(texts, max_tokens=64, prompt_name="query")
        plain = client.embed(texts)
    spec = IndexSpec(str(tmp_path / "x.duckdb"), "docs", key="id", text="body", target=arctic_server.target)
    for chunked, expected in ((False, want), (True, want_chunks.vectors)):
        extra = {"chunk_tokens": 64} if chunked else {}
        worker = ray_runner.EmbedBatchWorker(IndexSpec(**{**spec.__dict__, "prompt_name": "query", **extra}))
        got = np.array(worker(batch).column("embedding").to_pylist(), dtype=np.float32)
        np.testing.assert_allclose(got, expected, atol=1e-5)
    assert not np.allclose(want, plain, atol=1e-3)
