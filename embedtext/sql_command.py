"""``embedtext sql``: translate a Snowflake (Cortex) query to DuckDB, and optionally run it.

embedtext sql "SELECT AI_EMBED('e5-base-v2', body) FROM docs" --map e5-base-v2=embed_text:384
embedtext sql --file query.sql --run --database my.db --target unix:/tmp/embedtext.sock
echo "SELECT ..." | embedtext sql --run
"""

from __future__ import annotations

import sys

import click


def registered_dims(con, functions) -> dict[str, int | None]:
    """name -> dim of the ``FLOAT[dim]`` each function returns on ``con`` (None: not there).

    Asks DuckDB for the type of ``f(NULL)``: NULL texts make no model call.
    """
    import duckdb

    from embedtext.sql.ddl import array_size

    out: dict[str, int | None] = {}
    for name in functions:
        try:
            [(type_name,)] = con.sql(f"SELECT typeof({name}(NULL::VARCHAR))").fetchall()
        except duckdb.Error:
            out[name] = None
            continue
        out[name] = array_size(type_name)
    return out


def _read_query(query: str | None, file) -> str:
    if query is not None and file is not None:
        raise click.UsageError("give the query as an argument or with --file, not both")
    if file is not None:
        return file.read()
    if query is None or query == "-":
        if sys.stdin.isatty():
            raise click.UsageError("no query: pass it as an argument, with --file, or on stdin")
        return sys.stdin.read()
    return query


@click.command("sql")
@click.argument("query", required=False)
@click.option("--file", "-f", "file", type=click.File("r"), help="Read the query from this file ('-': stdin).")
@click.option("--read", default="snowflake", show_default=True, help="Input dialect (snowflake, duckdb, ...).")
@click.option(
    "--map",
    "maps",
    multiple=True,
    metavar="NAME=FUNCTION:DIM[:MODEL]",
    help="Snowflake model NAME -> DuckDB FUNCTION returning FLOAT[DIM] (registered for served MODEL "
    "with --run). NAME '*' maps every model. Repeatable.",
)
@click.option("--rewrite/--no-rewrite", default=True, show_default=True, help="Apply the call-saving rewrites.")
@click.option("--pretty", is_flag=True, help="Format the SQL.")
@click.option("--run", "run_it", is_flag=True, help="Run the translated SQL in DuckDB and print the results.")
@click.option("--database", default=":memory:", show_default=True, help="DuckDB database file (with --run).")
@click.option(
    "--target",
    default=None,
    envvar="EMBEDTEXT_TARGET",
    help="Server to ask for the default model's dimension (and to run with --run; default: start one).",
)
def sql_command(query, file, read, maps, rewrite, pretty, run_it, database, target) -> None:
    """Translate QUERY (Snowflake Cortex SQL by default) into DuckDB SQL using embed_text.

    Prints the DuckDB SQL; with --run, runs it against --database with embed_text registered.
    Without --map, a given --target (or, with --run, the started server) maps every model name
    to the server's default model, whose dimension it reports; with neither, AI_EMBED calls
    return FLOAT[] and the vector functions are written on lists.
    """
    from embedtext.sql import ModelMap, SqlTranslationError, transpile_statements

    text = _read_query(query, file)
    try:
        models = ModelMap.parse(list(maps)) if maps else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--map") from None
    if not run_it:
        if models is None and target is not None:
            models = _default_model_map(target)
        try:
            statements = transpile_statements(text, read, models=models, rewrite=rewrite, pretty=pretty)
        except SqlTranslationError as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(";\n".join(statements) + ";")
        return
    _run(text, read, models, rewrite, pretty, database, target)


def _default_model_map(target: str):
    """Every model name -> ``embed_text`` on the server's default model, with its dimension."""
    from embedtext.connectors.client import Client
    from embedtext.protocol.errors import EmbedTextError
    from embedtext.sql import ModelMap

    try:
        with Client(target) as client:
            return ModelMap({"*": ("embed_text", client.info().model().dim)})
    except EmbedTextError as exc:
        raise click.ClickException(f"cannot ask {target} for its default model: {exc}") from None


def _run(text, read, models, rewrite, pretty, database, target) -> None:
    import duckdb

    import embedtext
    from embedtext.protocol.errors import EmbedTextError
    from embedtext.sql import ModelMap, SqlTranslationError, transpile_statements

    con = duckdb.connect(database)
    try:
        reg = embedtext.register(con, target)
        if models is None:
            models = ModelMap({"*": (reg.name, reg.dim)})
        for entry in {(t.function, t.dim, t.model) for t in models.values()}:
            function, dim, model = entry
            if function != reg.name or model is not None or dim != reg.dim:
                embedtext.register(con, reg.target, name=function, model=model, dimensions=dim)
        models.check_registered(registered_dims(con, {t.function for t in models.values()}))
        statements = transpile_statements(text, read, models=models, rewrite=rewrite, pretty=pretty)
        for statement in statements:
            click.echo(f"-- {statement}", err=True)
            relation = con.sql(statement)
            if relation is not None:
                columns = relation.columns
                rows = relation.fetchall()
                click.echo("\t".join(columns))
                for row in rows:
                    click.echo("\t".join("NULL" if v is None else str(v) for v in row))
    except (SqlTranslationError, EmbedTextError, duckdb.Error, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        con.close()
