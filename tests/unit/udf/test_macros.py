import duckdb

from embedtext.udf.registration import _macros


def test_shipped_macros_parse_and_name_the_function():
    statements = _macros("my_embed")
    assert len(statements) == 2
    assert all("{embed_text}" not in s and "my_embed" in s for s in statements)
    con = duckdb.connect()
    # Stand-ins for the typed functions so the macros bind; the real ones are tested in integration/.
    con.execute("CREATE MACRO my_embed(t) AS [length(t)::FLOAT, 1.0]::FLOAT[2]").fetchall()
    con.execute("CREATE MACRO my_embed_query(t) AS [length(t)::FLOAT, 1.0]::FLOAT[2]").fetchall()
    for statement in statements:
        con.execute(statement).fetchall()
    con.execute("CREATE TABLE v AS SELECT i AS id, [i::FLOAT, 1.0]::FLOAT[2] AS vec FROM range(1, 6) t(i)").fetchall()
    top = con.execute("SELECT id FROM my_embed_search('v', 'vec', 'abcd', k := 2)").fetchall()
    assert [r[0] for r in top] == [4, 5]


def test_index_tables_ddl_creates_the_jobs_tables():
    from embedtext.sql import index_tables_ddl

    con = duckdb.connect()
    for statement in index_tables_ddl('"my_vectors"', "BIGINT", 16):
        con.execute(statement).fetchall()
    columns = con.execute(
        "SELECT table_name, column_name, data_type FROM information_schema.columns "
        "ORDER BY table_name, ordinal_position"
    ).fetchall()
    assert ("my_vectors", "embedding", "FLOAT[16]") in columns
    assert [c[1] for c in columns if c[0] == "my_vectors_failed"] == [
        "key",
        "content_hash",
        "model",
        "error",
        "attempts",
        "failed_at",
    ]
