"""``split_text_recursive_character`` on DuckDB: Snowflake's SPLIT_TEXT_RECURSIVE_CHARACTER.

What :func:`embedtext.sql.transpile` writes for ``SNOWFLAKE.CORTEX.SPLIT_TEXT_RECURSIVE_CHARACTER``,
with Snowflake's three forms: ``(text, format, chunk_size)``, ``(text, format, chunk_size, overlap)``
and ``(text, format, chunk_size, overlap, separators)``, returning ``VARCHAR[]``.

>>> import duckdb
>>> con = duckdb.connect()
>>> register_text_split(con)
>>> con.sql("SELECT split_text_recursive_character('hello world are you here', 'none', 15, 10)").fetchall()
[(['hello world are', 'world are you', 'are you here'],)]
"""

from __future__ import annotations

import duckdb
from duckdb.func import FunctionNullHandling, PythonUDFType

from embedtext.sql.text_split import DEFAULT_SEPARATORS, SQL_FUNCTION_NAME, split_text_recursive_character

#: The Python function behind the macro: a DuckDB Python function has one arity.
PYTHON_FUNCTION_NAME = f"__embedtext_{SQL_FUNCTION_NAME}"


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"  # a DuckDB literal keeps a newline as it is


def register_text_split(con: duckdb.DuckDBPyConnection) -> None:
    """Put ``split_text_recursive_character`` on ``con`` (again: replaced).

    A NULL argument gives NULL; an invalid format, chunk_size or overlap fails the query with
    the :func:`~embedtext.sql.text_split.split_text_recursive_character` ValueError's message.
    """
    try:
        con.remove_function(PYTHON_FUNCTION_NAME)
    except Exception:
        pass
    varchar, bigint = duckdb.sqltype("VARCHAR"), duckdb.sqltype("BIGINT")
    con.create_function(
        PYTHON_FUNCTION_NAME,
        split_text_recursive_character,
        [varchar, varchar, bigint, bigint, duckdb.list_type(varchar)],
        duckdb.list_type(varchar),
        type=PythonUDFType.NATIVE,  # one call per row: the splitting is Python either way
        null_handling=FunctionNullHandling.DEFAULT,  # any NULL argument: NULL, without a call
        exception_handling=duckdb.PythonExceptionHandling.DEFAULT,  # a bad argument fails the query
        side_effects=False,
    )
    # The shorter forms name the defaults, so the Python side always gets all five arguments.
    defaults = "[" + ", ".join(map(_sql_string, DEFAULT_SEPARATORS)) + "]"
    call = f"{PYTHON_FUNCTION_NAME}(text, format, chunk_size"
    con.execute(
        f"CREATE OR REPLACE TEMP MACRO {SQL_FUNCTION_NAME}"
        f"(text, format, chunk_size) AS {call}, 0, {defaults}), "
        f"(text, format, chunk_size, overlap) AS {call}, overlap, {defaults}), "
        f"(text, format, chunk_size, overlap, separators) AS {call}, overlap, separators)"
    ).fetchall()  # duckdb 2.0 refuses further work while a result is unfinished
