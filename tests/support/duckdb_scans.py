"""DuckDB scans through ``embed_text`` in tests: connections that load the extension or register
the Python UDF, tables that DuckDB's threads scan in parallel, and a scan on a thread of its own
(on the tests' path: test folders are not packages)."""

from __future__ import annotations

import threading
from pathlib import Path

import duckdb
import pytest
from server_metrics import summed, wait_for_metrics

import embedtext

ROWS = "embedtext_rows_total"  # the rows the server embedded


def extension_connection(path: str, target: str, **config) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection that LOADs the extension with EMBEDTEXT_TARGET set, as a shell would."""
    con = duckdb.connect(config={"allow_unsigned_extensions": "true", **config})
    with pytest.MonkeyPatch.context() as env:
        env.setenv("EMBEDTEXT_TARGET", target)
        con.execute(f"LOAD '{path}'")
    con.execute(f"SET embedtext_target = '{target}'")
    return con


def parallel_docs(con, tmp_path: Path, rows: int, body_sql: str) -> str:
    """A table ``docs(id, body)`` in row groups of 2,048 rows, which DuckDB's threads scan in parallel
    (an in-memory table of fewer than 122,880 rows is one row group: one thread)."""
    con.execute(f"ATTACH '{tmp_path}/docs.db' AS scan (ROW_GROUP_SIZE 2048)")
    con.execute(f"CREATE TABLE scan.docs AS SELECT i AS id, {body_sql} AS body FROM range({rows}) t(i)")
    return "scan.docs"


def background_scan(con, docs: str) -> tuple[threading.Thread, dict]:
    """``SELECT id, embed_text(body)`` of ``docs`` on a thread; its rows or error land in the dict."""
    outcome: dict = {}

    def scan():
        try:
            outcome["rows"] = con.sql(f"SELECT id, embed_text(body) FROM {docs} ORDER BY id").fetchall()
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            outcome["error"] = exc

    worker = threading.Thread(target=scan)
    worker.start()
    return worker, outcome


def scan_connection(client: str, extension_path: str, targets: str) -> duckdb.DuckDBPyConnection:
    """A connection on two threads whose ``embed_text`` is the extension's or the Python UDF's."""
    if client == "extension":
        return extension_connection(extension_path, targets, threads=2)
    con = duckdb.connect(config={"threads": 2})
    embedtext.register(con, targets.split(","))
    return con


def scan_under_way(con, docs: str, metrics) -> tuple[threading.Thread, dict]:
    """``background_scan``, once the server whose samples ``metrics()`` reads has embedded 2,048 rows of it."""
    before = summed(metrics(), ROWS)
    worker, outcome = background_scan(con, docs)

    def still_scanning() -> None:
        assert worker.is_alive(), outcome

    wait_for_metrics(metrics, lambda m: summed(m, ROWS) >= before + 2048, "the scan's rows", meanwhile=still_scanning)
    return worker, outcome
