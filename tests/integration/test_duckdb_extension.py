"""The DuckDB extension (udf/extension) in clients we did not write, the DuckDB CLI (PyPI's
duckdb-cli) and Python's duckdb ``LOAD``, against real servers. The Python UDF is its
specification: the same rows give the same vectors, NULLs and errors.

CI builds the extension first and names it in EMBEDTEXT_EXTENSION; without it, the tests build it
with scripts/build_extension.sh where cargo is installed."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import numpy as np
import pytest
from duckdb_scans import (
    ROWS,
    extension_connection,
    parallel_docs,
    scan_connection,
    scan_under_way,
)
from server_metrics import MetricsServer, summed

import embedtext
from embedtext.bench.servers import free_port

REFUSALS = 'embedtext_requests_total{code="RESOURCE_EXHAUSTED"'  # the server's refused calls
LONG_TEXT = "the cat sat on the bank of the river " * 54_000  # about 2 million characters


def udf_connection(target, **options) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    embedtext.register(con, target, **options)
    return con


def _vectors(con, sql: str) -> list:
    return [row[0] for row in con.sql(sql).fetchall()]


def _assert_same_vectors(got: list, expected: list, atol: float = 1e-5) -> None:
    assert len(got) == len(expected)
    assert [v is None for v in got] == [v is None for v in expected]  # NULLs where the UDF has them
    pairs = [(g, e) for g, e in zip(got, expected) if e is not None]
    np.testing.assert_allclose(np.array([g for g, _ in pairs]), np.array([e for _, e in pairs]), atol=atol)


def _cli(path: str, sql: str, env: dict[str, str] | None = None) -> str:
    duckdb_cli = Path(sys.executable).parent / "duckdb"
    assert duckdb_cli.exists(), "the duckdb-cli package is a dev dependency"
    out = subprocess.run(
        [str(duckdb_cli), "-unsigned", "-list", "-noheader", "-c", f"LOAD '{path}'; {sql}"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )
    assert out.returncode == 0, out.stderr + out.stdout
    return out.stdout


def _parse_vector(line: str) -> np.ndarray:
    return np.array([float(x) for x in line.strip().strip("[]").split(",")], dtype=np.float32)


def _needs_static_tls(path: str) -> bool:
    """Whether an ELF64 library's dynamic section sets DF_STATIC_TLS (its TLS is initial-exec)."""
    import struct

    data = Path(path).read_bytes()
    shoff, (shentsize, shnum) = struct.unpack_from("<Q", data, 0x28)[0], struct.unpack_from("<HH", data, 0x3A)
    for i in range(shnum):
        header = shoff + i * shentsize
        kind = struct.unpack_from("<I", data, header + 4)[0]
        offset, size = struct.unpack_from("<QQ", data, header + 0x18)
        if kind == 6:  # SHT_DYNAMIC: (tag, value) pairs
            for tag, value in struct.iter_unpack("<qQ", data[offset : offset + size]):
                if tag == 30:  # DT_FLAGS
                    return bool(value & 0x10)  # DF_STATIC_TLS
    return False


def test_the_extension_needs_no_static_tls(extension_path):
    """DuckDB dlopens it into processes that may have no static TLS space left (Python with torch
    and vLLM loaded): a dlopened library's initial-exec thread-locals need that space."""
    assert not _needs_static_tls(extension_path)


def test_duckdb_cli_set_connect_and_embed_matches_python_udf(servers, extension_path):
    target = servers.minilm.target
    out = _cli(
        extension_path,
        f"SET embedtext_target = '{target}'; SELECT embedtext_connect(); "
        "SELECT typeof(embed_text('hello world')); SELECT embed_text('hello world');",
        env={"EMBEDTEXT_TARGET": "127.0.0.1:1"},  # LOAD finds no server there: embedtext_connect registers it
    )
    lines = out.strip().splitlines()
    assert lines[0].startswith("embed_text(text) -> FLOAT[384]: all-MiniLM-L6-v2"), lines[0]
    assert lines[1] == "FLOAT[384]"
    expected = _vectors(udf_connection(target), "SELECT embed_text('hello world')")[0]
    np.testing.assert_allclose(_parse_vector(lines[2]), expected, atol=1e-6)


def test_the_cli_line_load_set_select_matches_python_udf(servers, extension_path):
    """The README's line, `LOAD; SET embedtext_target; SELECT embed_text(...)`, as it reads: LOAD
    finds the server (here by EMBEDTEXT_TARGET; a server on the default address needs nothing) and
    registers embed_text(text) -> FLOAT[384] for it."""
    target = servers.minilm.target
    out = _cli(
        extension_path,
        f"SET embedtext_target = '{target}'; SELECT embed_text('hello');",
        env={"EMBEDTEXT_TARGET": target},
    )
    expected = _vectors(udf_connection(target), "SELECT embed_text('hello')")[0]
    np.testing.assert_allclose(_parse_vector(out.strip()), expected, atol=1e-6)


def test_without_a_server_at_load_the_first_call_registers_embed_text(servers, extension_path, monkeypatch):
    """No server answers at LOAD: embed_text(text) has no type yet. Its first call, after SET, registers
    it for the server in the settings and asks for the statement again, which then gives the Python
    UDF's vector. A call on a number is told to pass text."""
    target = servers.minilm.target
    monkeypatch.setenv("EMBEDTEXT_TARGET", "127.0.0.1:1")  # nothing listens there
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{extension_path}'")
    con.execute(f"SET embedtext_target = '{target}'")
    with pytest.raises(duckdb.BinderException) as first:
        con.execute("SELECT embed_text('hello')").fetchall()
    message = str(first.value)
    assert "embed_text(text) -> FLOAT[384]: all-MiniLM-L6-v2 at " in message and "run the statement again" in message
    kind, vector = con.execute("SELECT typeof(embed_text('hello')), embed_text('hello')").fetchall()[0]
    assert kind == "FLOAT[384]"
    np.testing.assert_allclose(vector, _vectors(udf_connection(target), "SELECT embed_text('hello')")[0], atol=1e-6)
    with pytest.raises(duckdb.BinderException, match="embed_text takes text"):
        con.execute("SELECT embed_text(42)").fetchall()


def test_duckdb_cli_finds_its_server_by_environment_at_load(servers, extension_path):
    out = _cli(
        extension_path,
        "SELECT typeof(embed_text('a cat')), embed_text('a cat') IS NOT NULL;",
        env={"EMBEDTEXT_TARGET": servers.tiny.target},
    )
    assert out.strip() == "FLOAT[128]|true"


def _client_gives_the_python_udfs_vector(command: list[str], target: str, text: str, **run) -> None:
    """``command EXTENSION TARGET TEXT``, a program on another DuckDB client, prints embed_text's
    type and vector for TEXT as JSON: the same as the Python UDF's."""
    out = subprocess.run([*command, target, text], capture_output=True, text=True, timeout=300, **run)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["type"] == "FLOAT[384]"
    expected = _vectors(udf_connection(target), f"SELECT embed_text('{text}')")[0]
    np.testing.assert_allclose(got["vector"], expected, atol=1e-6)


def test_node_client_loads_it_and_matches_python_udf(servers, extension_path):
    """Node's DuckDB (@duckdb/node-api 1.5.6, which .ci/run installs and names in EMBEDTEXT_NODE_PATH)."""
    node_path = os.environ.get("EMBEDTEXT_NODE_PATH")
    if not node_path or shutil.which("node") is None:
        pytest.skip("set EMBEDTEXT_NODE_PATH to a node_modules holding @duckdb/node-api (CI installs it)")
    script = Path(__file__).with_name("node_client.cjs")
    command = ["node", str(script), extension_path]
    _client_gives_the_python_udfs_vector(
        command, servers.minilm.target, "hello from node", env={**os.environ, "NODE_PATH": node_path}
    )


def test_java_client_loads_it_and_matches_python_udf(servers, extension_path, tmp_path):
    """Java's DuckDB (DuckDB's JDBC driver, org.duckdb:duckdb_jdbc 2.0.0.1, which .ci/run fetches
    and names in EMBEDTEXT_DUCKDB_JDBC), run as a single-file program."""
    jar = os.environ.get("EMBEDTEXT_DUCKDB_JDBC")
    if not jar or shutil.which("java") is None:
        pytest.skip("set EMBEDTEXT_DUCKDB_JDBC to DuckDB's JDBC jar (CI fetches it)")
    program = Path(__file__).with_name("JavaClient.java")
    command = ["java", "-cp", jar, str(program), extension_path]
    _client_gives_the_python_udfs_vector(command, servers.minilm.target, "hello from java", cwd=tmp_path)


def test_go_client_loads_it_and_matches_python_udf(servers, extension_path):
    """Go's DuckDB (github.com/duckdb/duckdb-go/v2 2.10506.0, DuckDB 1.5.6): the program in
    go_client/, which .ci/run builds and names in EMBEDTEXT_GO_CLIENT."""
    program = os.environ.get("EMBEDTEXT_GO_CLIENT")
    if not program:
        pytest.skip("set EMBEDTEXT_GO_CLIENT to go_client/ built with go build (CI builds it)")
    _client_gives_the_python_udfs_vector([program, extension_path], servers.minilm.target, "hello from go")


def test_python_load_gives_the_python_udfs_vectors_row_for_row(servers, extension_path):
    target = servers.minilm.target
    ext, udf = extension_connection(extension_path, target), udf_connection(target)
    for con in (ext, udf):  # repeats, NULLs, empty and blank texts, over two chunks and a half
        con.execute(
            "CREATE TABLE docs AS SELECT i AS id, CASE WHEN i % 11 = 0 THEN NULL WHEN i % 13 = 0 THEN '' "
            "WHEN i % 17 = 0 THEN '  ' ELSE 'row ' || (i % 700) || ' the cat and the bank' END AS body "
            "FROM range(5000) t(i)"
        )
    assert ext.execute("SELECT typeof(embed_text(body)) FROM docs LIMIT 1").fetchall()[0] == ("FLOAT[384]",)
    sql = "SELECT embed_text(body) FROM docs ORDER BY id"
    got, expected = _vectors(ext, sql), _vectors(udf, sql)
    assert sum(v is None for v in got) > 500
    _assert_same_vectors(got, expected)


def test_model_and_dimensions_forms_match_python_udf(servers, arctic_server, extension_path):
    for target, sql, size in (
        (arctic_server.target, "SELECT embed_text('a river bank', 'arctic-like')", 768),
        (servers.minilm.target, "SELECT embed_text('a river bank', NULL, 64)", 64),
        (servers.minilm.target, "SELECT embed_text('a river bank', 'all-MiniLM-L6-v2', 128)", 128),
    ):
        ext = extension_connection(extension_path, target)
        got, expected = _vectors(ext, sql), _vectors(udf_connection(target), sql)
        assert len(got[0]) == size
        _assert_same_vectors(got, expected)
    assert ext.execute("SELECT typeof(embed_text('x', 'all-MiniLM-L6-v2'))").fetchall()[0] == ("FLOAT[]",)


def test_prompts_by_name_and_the_query_form_match_python_udf(servers, arctic_server, extension_path):
    """embed_text(text, model, dimensions, prompt) and embed_text_query(text), on a model with a query
    prompt (the arctic-like one) and on one without (all-MiniLM-L6-v2: the query form is the plain one)."""
    ext = extension_connection(extension_path, arctic_server.target)
    udf = udf_connection(arctic_server.target)
    for sql in (
        "SELECT embed_text('a river bank', 'arctic-like', NULL, 'query')",
        "SELECT embed_text_query('a river bank')",
        "SELECT embed_text(body, NULL, NULL, 'query') FROM (VALUES ('a'), (NULL), ('b')) t(body)",
    ):
        _assert_same_vectors(_vectors(ext, sql), _vectors(udf, sql))
    with embedtext.Client(arctic_server.target) as client:
        query, plain = client.embed(["a river bank"], prompt_name="query")[0], client.embed(["a river bank"])[0]
    got = _vectors(ext, "SELECT embed_text_query('a river bank')")[0]
    np.testing.assert_allclose(got, query, atol=1e-5)
    assert not np.allclose(got, plain, atol=1e-3)  # the prompt is there
    assert ext.execute("SELECT typeof(embed_text_query('x'))").fetchall()[0] == ("FLOAT[768]",)
    with pytest.raises(duckdb.Error, match="model arctic-like has no prompt 'document'; its prompts: 'query'"):
        ext.execute("SELECT embed_text('x', NULL, NULL, 'document')").fetchall()
    minilm = extension_connection(extension_path, servers.minilm.target)
    sql = "SELECT embed_text_query('a river bank'), embed_text('a river bank')"
    [(query_form, plain_form)] = minilm.execute(sql).fetchall()
    assert query_form == plain_form


def test_repeated_texts_in_a_chunk_are_sent_once(servers, extension_path):
    con = extension_connection(extension_path, servers.tiny.target)
    before = summed(servers.tiny_metrics(), ROWS)
    rows = con.sql("SELECT i % 7 AS k, embed_text('word ' || (i % 7)) FROM range(2048) t(i)").fetchall()
    assert summed(servers.tiny_metrics(), ROWS) - before == 7  # one chunk of 2048 rows, 7 distinct texts
    by_key: dict = {}
    for k, v in rows:
        assert v == by_key.setdefault(k, v)


def test_odd_inputs_give_the_python_udfs_answers(servers, extension_path):
    target = servers.minilm.target
    ext, udf = extension_connection(extension_path, target), udf_connection(target)
    for con in (ext, udf):
        con.execute("CREATE TABLE odd (id INTEGER, body VARCHAR)")
        con.executemany(
            "INSERT INTO odd VALUES (?, ?)",
            [(0, None), (1, ""), (2, " \t\n"), (3, LONG_TEXT), (4, "émoji 🐈 and 中文"), (5, "x")],
        )
    sql = "SELECT embed_text(body) FROM odd ORDER BY id"
    got = _vectors(ext, sql)
    assert got[:3] == [None, None, None]
    _assert_same_vectors(got, _vectors(udf, sql))


# A text over the tiny model's max tokens, beside texts it embeds whole.
OVER_MAX_TOKENS = "the river bank " * 200
ROW_OPTION_TEXTS = [(0, "a cat on the mat"), (1, OVER_MAX_TOKENS), (2, None), (3, "a dog in the fog")]


@pytest.mark.parametrize("truncate, on_error", [(True, "fail"), (False, "null")])
def test_truncate_and_on_error_settings_give_the_python_udfs_answers(servers, extension_path, truncate, on_error):
    """SET embedtext_truncate / embedtext_on_error as register(truncate=, on_error=): the long row
    cut and embedded, or NULL while the other rows keep their vectors."""
    target = servers.tiny.target
    ext = extension_connection(extension_path, target)
    ext.execute(f"SET embedtext_truncate = '{str(truncate).lower()}'")
    ext.execute(f"SET embedtext_on_error = '{on_error}'")
    udf = udf_connection(target, truncate=truncate, on_error=on_error)
    for con in (ext, udf):
        con.execute("CREATE TABLE rows (id INTEGER, body VARCHAR)")
        con.executemany("INSERT INTO rows VALUES (?, ?)", ROW_OPTION_TEXTS)
    sql = "SELECT embed_text(body) FROM rows ORDER BY id"
    got = _vectors(ext, sql)
    assert [v is None for v in got] == [False, not truncate, True, False]
    _assert_same_vectors(got, _vectors(udf, sql))


def test_a_refused_row_fails_the_query_by_default_as_in_the_python_udf(servers, extension_path):
    target = servers.tiny.target
    ext = extension_connection(extension_path, target)
    ext.execute("SET embedtext_truncate = 'false'")
    udf = udf_connection(target, truncate=False)
    sql = f"SELECT embed_text(body) FROM (VALUES ('a cat'), ('{OVER_MAX_TOKENS}')) t(body)"
    for con in (ext, udf):
        with pytest.raises(duckdb.Error, match="the model takes at most"):
            con.sql(sql).fetchall()


CHUNK_DOCS = [
    (0, " ".join(f"The river bank {i} held émoji 🐈 and the mill's wheel." for i in range(60))),
    (1, None),
    (2, ""),
    (3, " \t\n"),
    (4, "a short one"),
    (5, "Ünïcode façade naïve. " * 40),
]


@pytest.mark.parametrize(
    "ext_args, udf_args", [("", ""), (", 24", ", max_tokens := 24"), (", 24, 6", ", max_tokens := 24, overlap := 6")]
)
def test_embed_text_chunks_gives_the_python_functions_chunks(servers, extension_path, ext_args, udf_args):
    """Row for row: the same chunks (index, spans, tokens, text), the same vectors; NULL for NULL,
    none for a blank text. The extension takes max_tokens and overlap by position (DuckDB's C API
    has no named arguments); the Python function is a macro that takes them by name."""
    target = servers.tiny.target
    ext, udf = extension_connection(extension_path, target), udf_connection(target)
    for con in (ext, udf):
        con.execute("CREATE TABLE docs (id INTEGER, body VARCHAR)")
        con.executemany("INSERT INTO docs VALUES (?, ?)", CHUNK_DOCS)
    got = ext.sql(f"SELECT id, embed_text_chunks(body{ext_args}) FROM docs ORDER BY id").fetchall()
    expected = udf.sql(f"SELECT id, embed_text_chunks(body{udf_args}) FROM docs ORDER BY id").fetchall()
    assert [(i, None if c is None else len(c)) for i, c in got] == [
        (i, None if c is None else len(c)) for i, c in expected
    ]
    assert got[0][1] and len(got[0][1]) > 1 and got[1][1] is None and got[2][1] == [] == got[3][1]
    fields = ["chunk_index", "char_start", "char_end", "tokens", "text"]
    for (_, chunks), (_, reference) in zip(got, expected):
        for chunk, ref in zip(chunks or [], reference or []):
            assert [chunk[f] for f in fields] == [ref[f] for f in fields]
            np.testing.assert_allclose(chunk["embedding"], ref["embedding"], atol=1e-5)


def test_a_chunk_of_long_texts_goes_in_requests_under_the_message_limit(servers, extension_path):
    """70 texts of 1.3 MB, 91 MB in one chunk: over gRPC's 64 MiB message limit in one request, so
    the extension splits by text bytes (16 MiB a request) as the Python client does."""
    con = extension_connection(extension_path, servers.tiny.target)
    body = "repeat('river bank ' || i || ' ', 100000)"
    rows = con.sql(f"SELECT i, embed_text({body}) FROM range(70) t(i) ORDER BY i").fetchall()
    assert [i for i, _ in rows] == list(range(70)) and all(v is not None for _, v in rows)
    with embedtext.Client(servers.tiny.target) as client:
        expected = client.embed([f"river bank {i} " * 100_000 for i in (0, 69)])
    np.testing.assert_allclose([rows[0][1], rows[69][1]], expected, atol=1e-5)


@pytest.mark.parametrize(
    "sql, message",
    [
        ("SELECT embed_text('x', 'no-such-model')", "model 'no-such-model' is not served; served models: all-MiniLM"),
        ("SELECT embed_text('x', NULL, 0)", "dimensions=0 is not available"),
        ("SELECT embed_text('x', NULL, 5000)", "dimensions=5000 is not available: model all-MiniLM-L6-v2 has 384"),
        ("SELECT embed_text('x', 'm' || i) FROM range(2) t(i)", "must be the same for every row"),
        ("SELECT embed_text(repeat('x', 70000000))", "70000000 text bytes in one request, over gRPC's 64 MiB"),
    ],
)
def test_bad_arguments_are_clear_errors(servers, extension_path, sql, message):
    con = extension_connection(extension_path, servers.minilm.target)
    with pytest.raises(duckdb.Error, match=message):
        con.sql(sql).fetchall()


def test_dead_server_is_a_clear_error(extension_path, tmp_path):
    for target in (f"unix:{tmp_path}/nobody.sock", f"127.0.0.1:{free_port()}"):
        con = extension_connection(extension_path, target)
        with pytest.raises(duckdb.Error) as raised:
            con.sql("SELECT embedtext_connect()").fetchall()
        message = str(raised.value)
        assert target in message and "embedtext serve" in message, message
        with pytest.raises(duckdb.Error, match="embedtext serve"):
            con.sql("SELECT embed_text('x', NULL)").fetchall()


def test_a_dead_target_in_a_list_is_passed_over(servers, extension_path, tmp_path):
    """Two targets, the first dead: calls take turns between them, and each call that goes to the dead
    one first is answered by the other (four queries: two of them start there)."""
    live = servers.tiny.target
    con = extension_connection(extension_path, f"unix:{tmp_path}/dead.sock,{live}")
    with embedtext.Client(live) as client:
        expected = client.embed([f"row {i}" for i in range(40)])
    for _ in range(4):
        rows = con.sql("SELECT embed_text('row ' || i, NULL) FROM range(40) t(i) ORDER BY i").fetchall()
        np.testing.assert_allclose([r[0] for r in rows], expected, atol=1e-5)


def test_tls_and_token_from_settings(guarded, extension_path):
    con = extension_connection(extension_path, "127.0.0.1:1")
    con.execute(f"SET embedtext_target = '{guarded.target}'")
    con.execute(f"SET embedtext_tls_ca = '{guarded.tls.ca_pem}'")
    con.execute(f"SET embedtext_tls_client_cert = '{guarded.tls.client_pem}'")
    con.execute(f"SET embedtext_tls_client_key = '{guarded.tls.client_key}'")
    with pytest.raises(duckdb.Error, match="(?i)token|unauthenticated"):
        con.sql("SELECT embed_text('a guarded cat', NULL)").fetchall()
    con.execute(f"SET embedtext_token = '{guarded.token}'")
    got = con.execute("SELECT embed_text('a guarded cat', NULL)").fetchall()[0][0]
    with guarded.client() as client:
        np.testing.assert_allclose(got, client.embed(["a guarded cat"])[0], atol=1e-5)


@contextlib.contextmanager
def null_engine_server(log_dir: Path, port: int | None = None):
    """A server on the null engine (vectors from the token ids, no model), with its metrics; on a Unix socket, or
    on 127.0.0.1:``port``."""
    from embedtext.connectors.local_server import LocalServer

    metrics_port = free_port()
    server = LocalServer(
        ["default"],
        port=port,
        args=["--set", "engine=null", "--metrics-port", str(metrics_port)],
        log_path=log_dir / "server.log",
    ).start()
    try:
        server.wait_ready(900)
        yield MetricsServer(server, metrics_port)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def null_server(tmp_path_factory):
    """The scan tests are about the extension's bookkeeping across DuckDB's threads and servers,
    not the model's arithmetic."""
    with null_engine_server(tmp_path_factory.mktemp("null")) as server:
        yield server


def test_scan_of_100000_rows_on_two_threads(null_server, extension_path, tmp_path):
    con = extension_connection(extension_path, null_server.target, threads=2)
    docs = parallel_docs(con, tmp_path, 100_000, "'document number ' || i")
    before = summed(null_server.metrics(), ROWS)
    count, filled = con.execute(
        f"SELECT count(*), count(v) FROM (SELECT embed_text(body) AS v FROM {docs})"
    ).fetchall()[0]
    assert (count, filled) == (100_000, 100_000)
    assert summed(null_server.metrics(), ROWS) - before == 100_000  # every distinct row once
    # Rows close together, so that each call carries several of them (in what order, the vectors tell).
    sample = con.sql(f"SELECT body, embed_text(body) FROM {docs} WHERE id % 97 = 0 ORDER BY id").fetchall()
    with embedtext.Client(null_server.target, max_batch_rows=1) as client:  # each row alone: a reply per row
        np.testing.assert_allclose([v for _, v in sample], client.embed([b for b, _ in sample]), atol=1e-6)


@pytest.mark.parametrize("client", ["extension", "python_udf"])
def test_a_server_killed_mid_scan_leaves_the_query_to_the_other_target(
    client, null_server, extension_path, tmp_path_factory
):
    """Two targets, and one of them is killed while the scan's requests are in flight: those
    requests go to the other target, and the query gets every row (the Python UDF does the same)."""
    with null_engine_server(tmp_path_factory.mktemp("doomed")) as doomed:
        con = scan_connection(client, extension_path, f"{doomed.target},{null_server.target}")
        docs = parallel_docs(con, tmp_path_factory.mktemp("docs"), 100_000, "'survivor ' || i")
        worker, outcome = scan_under_way(con, docs, doomed.metrics)
        os.killpg(doomed.process.pid, signal.SIGKILL)
        worker.join(600)
    assert "error" not in outcome, outcome.get("error")
    rows = outcome["rows"]
    assert [r[0] for r in rows] == list(range(100_000)) and all(r[1] is not None for r in rows)
    sample = rows[::9973]
    with embedtext.Client(null_server.target, max_batch_rows=1) as survivor:  # each row alone
        expected = survivor.embed([f"survivor {i}" for i, _ in sample])
    np.testing.assert_allclose([v for _, v in sample], expected, atol=1e-6)


@pytest.mark.parametrize("client", ["extension", "python_udf"])
def test_a_server_replaced_within_seconds_mid_scan_is_not_seen(client, extension_path, tmp_path_factory):
    """The only server is killed mid-scan, and a second later another one takes its socket (a
    supervisor's quick restart): the calls in flight wait for it, and the query gets every row."""
    with (
        null_engine_server(tmp_path_factory.mktemp("doomed")) as doomed,
        null_engine_server(tmp_path_factory.mktemp("spare")) as spare,
    ):
        con = scan_connection(client, extension_path, doomed.target)
        docs = parallel_docs(con, tmp_path_factory.mktemp("docs"), 100_000, "'replaced ' || i")
        worker, outcome = scan_under_way(con, docs, doomed.metrics)
        os.killpg(doomed.process.pid, signal.SIGKILL)
        threading.Event().wait(1.0)  # an outage of a second: longer than a retry at once, within the wait
        os.replace(spare.server.uds, doomed.server.uds)  # the spare now answers at the doomed server's address
        worker.join(600)
        assert "error" not in outcome, outcome.get("error")
        assert summed(spare.metrics(), ROWS) > 0  # the rest came from the spare
        rows = outcome["rows"]
        assert [r[0] for r in rows] == list(range(100_000)) and all(r[1] is not None for r in rows)
        sample = rows[::9973]
        with embedtext.Client(doomed.target, max_batch_rows=1) as reference:  # the spare, each row alone
            expected = reference.embed([f"replaced {i}" for i, _ in sample])
    np.testing.assert_allclose([v for _, v in sample], expected, atol=1e-6)


def test_a_server_stopped_mid_scan_is_a_clear_error_and_the_connection_works_once_it_is_back(
    extension_path, tmp_path_factory
):
    """SIGTERM (a restart) of the only server under a long scan: the query fails with a clear error,
    no hang; once a server is back at that address, the same connection embeds again (as the Python
    UDF does: tests/integration/test_faults.py)."""
    port = free_port()
    with null_engine_server(tmp_path_factory.mktemp("first"), port=port) as first:
        con = extension_connection(extension_path, first.target, threads=2)
        docs = parallel_docs(con, tmp_path_factory.mktemp("docs"), 100_000, "'restart ' || i")
        worker, outcome = scan_under_way(con, docs, first.metrics)
        stopped = time.monotonic()
        first.server.stop()  # SIGTERM, then wait for it to exit
        worker.join(120)
    assert not worker.is_alive(), "the query hung after the server went away"
    message = str(outcome.get("error"))
    assert first.target in message and ("shutting down" in message or "embedtext serve" in message), message
    print(f"query failed {time.monotonic() - stopped:.1f}s after the server was stopped: {message[:200]}")
    with null_engine_server(tmp_path_factory.mktemp("second"), port=port) as second:
        got = con.sql("SELECT embed_text('back again')").fetchall()[0][0]
        with embedtext.Client(second.target) as client:
            np.testing.assert_allclose(got, client.embed(["back again"])[0], atol=1e-6)


def test_a_full_queue_is_retried_after_the_servers_hint(servers, extension_path, tmp_path):
    """Eight DuckDB threads put 16,384 rows in flight on a server that queues 4,096: the refused
    requests come back after the server's retry hint, and the query succeeds."""
    con = extension_connection(extension_path, servers.tiny.target, threads=8)
    docs = parallel_docs(con, tmp_path, 40_000, "'queue ' || i")
    before = summed(servers.tiny_metrics(), REFUSALS)
    query = f"SELECT count(*), count(v) FROM (SELECT embed_text(body) AS v FROM {docs})"
    count, filled = con.execute(query).fetchall()[0]
    assert (count, filled) == (40_000, 40_000)
    assert summed(servers.tiny_metrics(), REFUSALS) > before  # the bound was hit: the rows above came through retries
