"""``embedtext sql``: print the DuckDB SQL, or run it against a database with embed_text registered."""

import duckdb
from click.testing import CliRunner

from embedtext.sql_command import sql_command


def test_prints_duckdb_sql_from_an_argument_and_from_stdin():
    runner = CliRunner()
    query = "SELECT SNOWFLAKE.CORTEX.EMBED_TEXT_768('arctic', body) AS v FROM docs"
    out = runner.invoke(sql_command, [query, "--map", "arctic=embed_768:768", "--no-rewrite"])
    assert out.exit_code == 0, out.output
    assert out.output == "SELECT embed_768(body) AS v FROM docs;\n"
    piped = runner.invoke(sql_command, ["--map", "arctic=embed_768:768", "--no-rewrite"], input=query)
    assert piped.output == out.output


def test_dimension_mismatch_is_a_clear_error():
    out = CliRunner().invoke(sql_command, ["SELECT EMBED_TEXT_768('arctic', b) FROM d", "--map", "arctic=embed_text:128"])
    assert out.exit_code == 1
    assert "asks for 768 dimensions" in out.output


def test_runs_a_file_against_a_database(servers, tmp_path):
    database = tmp_path / "cli.db"
    con = duckdb.connect(str(database))
    con.execute("CREATE TABLE docs AS SELECT * FROM (VALUES (1, 'bread dough'), (2, 'a sick dog')) v(id, body)").fetchall()
    con.close()
    query = tmp_path / "q.sql"
    query.write_text(
        "SELECT id, VECTOR_COSINE_SIMILARITY(AI_EMBED('e5-base-v2', body), AI_EMBED('e5-base-v2', 'bread dough')) AS s "
        "FROM docs ORDER BY s DESC"
    )
    out = CliRunner().invoke(
        sql_command,
        ["--file", str(query), "--run", "--database", str(database), "--target", servers.tiny.target,
         "--map", "e5-base-v2=embed_64:64:tiny"],
    )
    assert out.exit_code == 0, out.output
    lines = [line for line in out.output.splitlines() if not line.startswith("--")]
    assert lines[0] == "id\ts"
    assert lines[1].startswith("1\t1.0") or lines[1].startswith("1\t0.99999")
    assert lines[2].startswith("2\t")


def test_run_refuses_an_unmapped_model(servers):
    out = CliRunner().invoke(
        sql_command,
        ["SELECT AI_EMBED('other', 'x')", "--run", "--target", servers.tiny.target, "--map", "e5=embed_text:128"],
    )
    assert out.exit_code == 1 and "'other' is not mapped" in out.output
