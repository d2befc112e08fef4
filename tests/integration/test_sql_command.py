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
    out = CliRunner().invoke(
        sql_command, ["SELECT EMBED_TEXT_768('arctic', b) FROM d", "--map", "arctic=embed_text:128"]
    )
    assert out.exit_code == 1
    assert "asks for 768 dimensions" in out.output


def test_runs_a_file_against_a_database(servers, tmp_path):
    database = tmp_path / "cli.db"
    con = duckdb.connect(str(database))
    con.execute(
        "CREATE TABLE docs AS SELECT * FROM (VALUES (1, 'bread dough'), (2, 'a sick dog')) v(id, body)"
    ).fetchall()
    con.close()
    query = tmp_path / "q.sql"
    query.write_text(
        "SELECT id, VECTOR_COSINE_SIMILARITY(AI_EMBED('e5-base-v2', body), AI_EMBED('e5-base-v2', 'bread dough')) AS s "
        "FROM docs ORDER BY s DESC"
    )
    out = CliRunner().invoke(
        sql_command,
        [
            "--file",
            str(query),
            "--run",
            "--database",
            str(database),
            "--target",
            servers.tiny.target,
            "--map",
            "e5-base-v2=embed_64:64:tiny",
        ],
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


def test_prints_sql_that_binds_without_a_map(servers):
    """AI_EMBED names no dimension: with --target the server's default model gives it; without,
    the vector functions are written on lists. Both bind in DuckDB."""
    import embedtext

    query = "SELECT id, VECTOR_L2_DISTANCE(AI_EMBED('e5', body), AI_EMBED('e5', 'bread')) AS d FROM docs ORDER BY d"
    asked = CliRunner().invoke(sql_command, [query, "--target", servers.tiny.target, "--no-rewrite"])
    assert asked.exit_code == 0, asked.output
    assert (
        asked.output == "SELECT id, ARRAY_DISTANCE(embed_text(body), embed_text('bread')) AS d FROM docs ORDER BY d;\n"
    )
    unmapped = CliRunner().invoke(sql_command, [query.replace("'e5'", "'tiny'")])
    assert unmapped.exit_code == 0, unmapped.output
    assert "list_distance(" in unmapped.output
    con = duckdb.connect()
    embedtext.register(con, servers.tiny.target)
    con.execute("CREATE TABLE docs AS SELECT * FROM (VALUES (1, 'bread'), (2, 'a sick dog')) v(id, body)").fetchall()
    for out in (asked.output, unmapped.output):
        rows = con.sql(out.rstrip().rstrip(";")).fetchall()
        assert [r[0] for r in rows] == [1, 2] and rows[0][1] < 1e-3
    con.close()


def test_target_that_does_not_answer_is_a_clear_error(tmp_path):
    out = CliRunner().invoke(sql_command, ["SELECT AI_EMBED('e5', 'x')", "--target", f"unix:{tmp_path}/none.sock"])
    assert out.exit_code == 1 and "cannot ask" in out.output
