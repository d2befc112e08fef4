import duckdb

from embedtext.udf.registration import _macros


def test_shipped_macros_parse_and_name_the_function():
    statements = _macros("my_embed")
    assert len(statements) == 2
    assert all("{embed_text}" not in s and "my_embed" in s for s in statements)
    con = duckdb.connect()
    # A stand-in typed function so the macros bind; the real one is tested in integration/.
    con.execute("CREATE MACRO my_embed(t) AS [length(t)::FLOAT, 1.0]::FLOAT[2]").fetchall()
    for statement in statements:
        con.execute(statement).fetchall()
    con.execute("CREATE TABLE v AS SELECT i AS id, [i::FLOAT, 1.0]::FLOAT[2] AS vec FROM range(1, 6) t(i)").fetchall()
    top = con.execute("SELECT id FROM my_embed_search('v', 'vec', 'abcd', k := 2)").fetchall()
    assert [r[0] for r in top] == [4, 5]
