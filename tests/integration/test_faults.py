"""Faults with real processes: deadlines, and a server restarted under a DuckDB query.
(An engine killed under load: test_default_path_faults; the server killed under an indexing
job: test_indexing.)

The restart test uses the ``guarded`` server (mutual TLS and a token), so it also covers the
secure path end to end through DuckDB.
"""

import threading
import time

import duckdb
import numpy as np
import pytest
from server_metrics import summed, wait_for_metrics

import embedtext
from embedtext.protocol.errors import DeadlineExceededError


def _batches_started(metrics: dict[str, float]) -> float:
    return summed(metrics, "embedtext_replica_batches_total")


def test_deadline_shorter_than_the_work_is_exceeded_and_the_work_stops(servers):
    """4,000 rows of 128 tokens take seconds on the tiny server; a 0.5 s deadline ends the
    call with DEADLINE_EXCEEDED and the server starts no more batches for it."""
    if not servers.tiny_metrics_port:
        pytest.skip("needs the tiny server's metrics")
    texts = [f"row {i} " + "tok " * 200 for i in range(4000)]
    before = _batches_started(servers.tiny_metrics())
    with embedtext.Client(servers.tiny.target, max_batch_rows=4000, timeout=0.5) as client:
        with pytest.raises(DeadlineExceededError):
            client.embed(texts)
    # Its rows leave the queue (nobody waits for them) and the engines go idle: no batch of it can start after.
    settled = wait_for_metrics(
        servers.tiny_metrics,
        lambda m: (
            m.get('embedtext_queued_rows{model="tiny"}') == 0 and summed(m, "embedtext_replica_inflight_batches") == 0
        ),
        "the abandoned call's rows left the queue and the engines",
    )
    total = 4000 / 64  # the tiny server closes batches at 64 rows
    started = _batches_started(settled) - before
    assert started < total / 2, f"{started:.0f} of {total:.0f} batches ran for a call nobody waited for"
    with embedtext.Client(servers.tiny.target) as client:  # and it serves the next caller at once
        assert client.embed(["next"]).shape == (1, 128)


@pytest.mark.slow
def test_server_restarted_during_a_duckdb_query(guarded, tiny_client):
    """SIGTERM (a restart) under a long query: the query fails with a clear error, no hang;
    once the server is back, the same connection embeds again."""
    con = duckdb.connect()
    embedtext.register(con, guarded.client(timeout=300))
    con.execute(
        "CREATE TABLE docs AS SELECT i AS id, 'row ' || i || ' of a long table' AS body FROM range(300000) t(i)"
    )
    outcome = {}

    def query():
        try:
            outcome["rows"] = con.sql("SELECT sum(embed_text(body)[1]) FROM docs").fetchall()
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            outcome["error"] = exc

    before = summed(guarded.metrics(), "embedtext_rows_total")
    worker = threading.Thread(target=query)
    worker.start()
    wait_for_metrics(
        guarded.metrics, lambda m: summed(m, "embedtext_rows_total") >= before + 2048, "the query's first rows"
    )
    assert worker.is_alive(), outcome  # 300,000 rows: far from done
    stopped = time.monotonic()
    guarded.server.stop()  # SIGTERM, then wait for it to exit
    try:
        worker.join(120)
        assert not worker.is_alive(), "the query hung after the server went away"
        message = str(outcome.get("error"))
        assert "UnavailableError" in message and guarded.target in message, message
        assert "shutting down" in message or "embedtext serve" in message, message
        print(f"query failed {time.monotonic() - stopped:.1f}s after the server was stopped: {message[:200]}")
    finally:
        guarded.start()  # back for the query below
    expected = tiny_client.embed(["back again"])
    got = con.sql("SELECT embed_text('back again')").fetchall()[0][0]
    np.testing.assert_allclose(np.array(got), expected[0], atol=1e-5)
