"""Faults with real processes: a server restarted under a DuckDB query. (An engine killed under
load, and a deadline that passes while the engines are frozen: test_default_path_faults; the
server killed under an indexing job: test_indexing.)

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
