"""SPLIT_TEXT_RECURSIVE_CHARACTER: the splitter against Snowflake's documented results, the Snowflake -> DuckDB
translation (input -> expected pairs), and the translated SQL run in DuckDB with ``register_text_split``."""

import duckdb
import pytest
import sqlglot

from embedtext.sql import SqlTranslationError, transpile
from embedtext.sql.dialect import CortexSnowflake, EmbedtextDuckDB
from embedtext.sql.text_split import split_text_recursive_character
from embedtext.udf.text_split import register_text_split

SQL_REFERENCE = "docs.snowflake.com/en/sql-reference/functions/split_text_recursive_character-snowflake-cortex"
SNOWPARK_REFERENCE = (
    "Snowpark API reference, DataFrameAIFunctions.split_text_recursive_character (docs.snowflake.com/en/developer-guide/"
    "snowpark/reference/python/latest/snowpark/api/snowflake.snowpark.DataFrameAIFunctions.split_text_recursive_character;"
    " its doctests in snowflakedb/snowpark-python, src/snowflake/snowpark/dataframe_ai_functions.py)"
)

# (where the expectation comes from, text, the call's other arguments: format, chunk_size[, overlap[, separators]],
# chunks): what Snowflake documents.
SNOWFLAKE_EXAMPLES = [
    (SQL_REFERENCE, "hello world are you here", ("none", 15, 10), ["hello world are", "world are you", "are you here"]),
    (
        SNOWPARK_REFERENCE,
        "This is a long document. It has multiple sentences.\n\nAnd multiple paragraphs.",
        ("none", 30, 5),
        ["This is a long document. It", "It has multiple sentences.", "And multiple paragraphs."],
    ),
    (
        SNOWPARK_REFERENCE,
        "# Title\n\n## Subtitle\n\nMore content.",
        ("markdown", 25, 3),
        ["# Title", "## Subtitle", "More content."],
    ),
    (
        SNOWPARK_REFERENCE,
        "def hello():\n    print('Hello')\n\ndef world():\n    print('World')",
        ("none", 30, 0, ["\n\n", "\n", "    ", " ", ""]),
        ["def hello():", "print('Hello')", "def world():", "print('World')"],
    ),
    (
        SNOWPARK_REFERENCE,
        "First sentence. Second sentence. Third sentence.",
        ("none", 15, 3, [". ", " ", ""]),
        ["First sentence", ". Second", "sentence", ". Third", "sentence."],
    ),
]

LANGCHAIN = (
    "LangChain (langchain-text-splitters 1.1.3) RecursiveCharacterTextSplitter: the markdown patterns, the separators"
)
SAMPLE = f"inputs: a Snowflake sample script on GitHub (no outputs shown); expectation: {LANGCHAIN}"
WONDERFUL = "# This is\na wonderful day\n## indeed!"

# Cases Snowflake's pages show no result for: the expectation is what LangChain, which Snowflake's function is
# based on, returns for the same input (markdown: Language.MARKDOWN's separators, the formats' default).
LANGCHAIN_CASES = [
    (
        LANGCHAIN,
        "# Intro\nSome words here.\n## Usage\nRun it.",
        ("markdown", 20),
        ["# Intro", "Some words here.", "## Usage\nRun it."],
    ),
    (
        LANGCHAIN,
        "Text before.\n```\ncode()\n```\nText after the fence.",
        ("markdown", 20),
        ["Text before.", "```\ncode()", "```", "Text after the", "fence."],
    ),
    (
        LANGCHAIN,
        "Part one is here.\n---\nPart two is here.",
        ("markdown", 20),
        ["Part one is here.", "---", "Part two is here."],
    ),
    # The format in any case.
    (LANGCHAIN, "# A\n\n## B\n\nC", ("MARKDOWN", 5), ["# A", "## B", "C"]),
    # Between characters, with overlap; without it (the three-argument form), none.
    (LANGCHAIN, "abcdefghij", ("none", 4, 1), ["abcd", "defg", "ghij"]),
    (LANGCHAIN, "abcdefghij", ("none", 4), ["abcd", "efgh", "ij"]),
    # A piece of exactly chunk_size is not merged but split further; with no separator left, kept unstripped.
    (LANGCHAIN, "x abc", ("none", 4, 0, [" "]), ["x", " abc"]),
    # The overlap kept only while the next piece still fits beside it.
    (LANGCHAIN, "bb a", ("none", 3, 2), ["bb", "a"]),
    # No separator left for a long piece: it is kept whole, and unstripped.
    (LANGCHAIN, "one two\nthreefourfive six", ("none", 8, 0, ["\n", " "]), ["one two", "\nthreefourfive", "six"]),
    # Separators are text, not patterns.
    (LANGCHAIN, "a.b. c*d", ("none", 3, 0, [". ", "*"]), ["a.b", ". c", "*d"]),
    # An empty list: the default separators.
    (LANGCHAIN, "a b c d", ("none", 3, 0, []), ["a b", "c", "d"]),
    (LANGCHAIN, "", ("none", 5), []),
    # Whitespace-only chunks are dropped.
    (LANGCHAIN, "   \n\n  ", ("none", 5), []),
    # Characters, not bytes.
    (LANGCHAIN, "héllo wörld ünïcode", ("none", 6, 2), ["héllo", "wörld", "ünïco", "code"]),
    # Markdown with separators: the markdown patterns, then these separators instead of the default.
    (
        LANGCHAIN,
        "# Title\nalpha beta gamma delta",
        ("markdown", 12, 4, ["|", " ", ""]),
        ["#", "Title\nalpha", "beta gamma", "delta"],
    ),
    (SAMPLE, "This is a wonderful day indeed!", ("none", 15), ["This is a", "wonderful day", "indeed!"]),
    (SAMPLE, WONDERFUL, ("none", 15, 3), ["# This is", "a wonderful", "day", "## indeed!"]),
    (SAMPLE, WONDERFUL, ("none", 15, 0, ["#", "\n"]), ["# This is", "\na wonderful day", "## indeed!"]),
    (SAMPLE, WONDERFUL, ("markdown", 15), ["# This is", "a wonderful", "day", "## indeed!"]),
]

CASES = SNOWFLAKE_EXAMPLES + LANGCHAIN_CASES
CASE_IDS = [f"{i}-{args[0]}-{args[1]}" for i, (_, _, args, _) in enumerate(CASES)]


@pytest.mark.parametrize(("source", "text", "args", "expected"), CASES, ids=CASE_IDS)
def test_split_matches_the_reference(source, text, args, expected):
    assert split_text_recursive_character(text, *args) == expected, source


# Snowflake's documented argument checks (SQL reference: chunk_size above zero, overlap below chunk_size, format
# 'none' or 'markdown').
ARGUMENT_ERRORS = [
    (("text", "html", 10, 0), "format must be one of 'none', 'markdown'"),
    (("text", "", 10, 0), "format must be one of"),
    (("text", "none", 0, 0), "chunk_size must be greater than zero, got 0"),
    (("text", "none", -3, 0), "chunk_size must be greater than zero, got -3"),
    (("text", "none", 10, 10), r"overlap must be at least zero and smaller than chunk_size \(10\), got 10"),
    (("text", "none", 10, 11), r"smaller than chunk_size \(10\), got 11"),
    (("text", "none", 10, -1), "overlap must be at least zero"),
    (("text", "none", 10, 0, ["a", None]), "separators must be strings"),
]


@pytest.mark.parametrize(("args", "message"), ARGUMENT_ERRORS)
def test_invalid_arguments_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        split_text_recursive_character(*args)


# (Snowflake input, DuckDB expected): the call in its three forms, qualified or not, in a real statement.
TRANSLATIONS = [
    (
        "SELECT SNOWFLAKE.CORTEX.SPLIT_TEXT_RECURSIVE_CHARACTER('hello world are you here', 'none', 15, 10)",
        "SELECT split_text_recursive_character('hello world are you here', 'none', 15, 10)",
    ),
    (
        "SELECT snowflake.cortex.split_text_recursive_character(body, 'markdown', 512) AS chunks FROM docs",
        "SELECT split_text_recursive_character(body, 'markdown', 512) AS chunks FROM docs",
    ),
    (
        "SELECT SPLIT_TEXT_RECURSIVE_CHARACTER(body, 'none', 15, 3, ['. ', ' ', '']) FROM docs",
        "SELECT split_text_recursive_character(body, 'none', 15, 3, ['. ', ' ', '']) FROM docs",
    ),
    (  # Snowflake's escapes become the characters; a DuckDB string holds a newline as it is
        "SELECT SPLIT_TEXT_RECURSIVE_CHARACTER(body, 'none', 15, 0, ['#', '\\n']) FROM docs",
        "SELECT split_text_recursive_character(body, 'none', 15, 0, ['#', '\n']) FROM docs",
    ),
    (
        "SELECT SPLIT_TEXT_RECURSIVE_CHARACTER(body, 'none', 15, 0, ARRAY_CONSTRUCT('\\n\\n', '')) FROM docs",
        "SELECT split_text_recursive_character(body, 'none', 15, 0, ['\n\n', '']) FROM docs",
    ),
    (
        "SELECT id, ARRAY_SIZE(SNOWFLAKE.CORTEX.SPLIT_TEXT_RECURSIVE_CHARACTER(title || ' ' || body, 'none', 700, 100)) FROM docs",
        "SELECT id, ARRAY_LENGTH(split_text_recursive_character(title || ' ' || body, 'none', 700, 100)) FROM docs",
    ),
]


@pytest.mark.parametrize(("source", "expected"), TRANSLATIONS)
def test_translation(source, expected):
    assert transpile(source) == expected


def test_the_dialect_writes_the_registered_name_whatever_the_case_setting():
    out = sqlglot.transpile(
        "SELECT SPLIT_TEXT_RECURSIVE_CHARACTER(t, 'none', 5)", read=CortexSnowflake, write=EmbedtextDuckDB
    )
    assert out == ["SELECT split_text_recursive_character(t, 'none', 5)"]


@pytest.mark.parametrize("arguments", ["body, 'none'", "body, 'none', 15, 0, [' '], 'extra'"])
def test_a_wrong_argument_count_is_refused_before_any_row_runs(arguments):
    with pytest.raises(SqlTranslationError, match="takes 3 to 5 arguments"):
        transpile(f"SELECT SPLIT_TEXT_RECURSIVE_CHARACTER({arguments}) FROM docs")


def _snowflake_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n").replace("\t", "\\t")
    return f"'{escaped}'"


def _snowflake_call(text: str, fmt: str, *numbers_and_separators) -> str:
    """The Snowflake call with the same arguments, in the same form (3, 4 or 5 arguments)."""
    args = [_snowflake_string(text), _snowflake_string(fmt)]
    for arg in numbers_and_separators:
        args.append("[" + ", ".join(map(_snowflake_string, arg)) + "]" if isinstance(arg, list) else str(arg))
    return f"SNOWFLAKE.CORTEX.SPLIT_TEXT_RECURSIVE_CHARACTER({', '.join(args)})"


@pytest.fixture
def con():
    connection = duckdb.connect()
    register_text_split(connection)
    yield connection
    connection.close()


@pytest.mark.parametrize(("source", "text", "args", "expected"), CASES, ids=CASE_IDS)
def test_translated_sql_runs_in_duckdb(con, source, text, args, expected):
    sql = transpile(f"SELECT {_snowflake_call(text, *args)}")
    assert con.sql(sql).fetchall() == [(expected,)], source


def test_rows_keep_their_order_and_null_gives_null(con):
    con.execute("CREATE TABLE docs (id INTEGER, body VARCHAR)").fetchall()
    con.execute("INSERT INTO docs VALUES (1, 'a b c d'), (2, NULL), (3, ''), (4, 'x y')").fetchall()
    sql = transpile(
        "SELECT id, SPLIT_TEXT_RECURSIVE_CHARACTER(body, 'none', 3) AS chunks, typeof(chunks) FROM docs ORDER BY id"
    )
    assert con.sql(sql).fetchall() == [
        (1, ["a b", "c", "d"], "VARCHAR[]"),
        (2, None, "VARCHAR[]"),
        (3, [], "VARCHAR[]"),
        (4, ["x y"], "VARCHAR[]"),
    ]


@pytest.mark.parametrize(
    "arguments", ["'a b', NULL, 3, 0", "'a b', 'none', NULL, 0", "'a b', 'none', 3, NULL", "'a b', 'none', 3, 0, NULL"]
)
def test_a_null_argument_gives_null(con, arguments):
    assert con.sql(f"SELECT split_text_recursive_character({arguments})").fetchall() == [(None,)]


def test_an_invalid_argument_fails_the_query_with_the_reason(con):
    with pytest.raises(duckdb.Error, match=r"overlap must be at least zero and smaller than chunk_size \(5\), got 5"):
        con.sql(transpile("SELECT SPLIT_TEXT_RECURSIVE_CHARACTER('a b', 'none', 5, 5)")).fetchall()


def test_registering_again_replaces_the_function(con):
    register_text_split(con)
    assert con.sql("SELECT split_text_recursive_character('a b c', 'none', 3)").fetchall() == [(["a b", "c"],)]


def test_lateral_flatten_of_the_chunks_gives_a_row_per_chunk_as_snowflake(con):
    """Snowflake's way to a row per chunk, LATERAL FLATTEN (or TABLE(FLATTEN(...))), translated: each
    chunk's INDEX from 0, VALUE, PATH and THIS; a NULL text gives no rows."""
    con.execute("CREATE TABLE docs (id INTEGER, body VARCHAR)")
    con.execute("INSERT INTO docs VALUES (1, 'a b c d'), (2, NULL), (3, 'x y')")
    call = "SNOWFLAKE.CORTEX.SPLIT_TEXT_RECURSIVE_CHARACTER(d.body, 'none', 3)"
    lateral = f"SELECT d.id, c.index, c.value, c.path FROM docs d, LATERAL FLATTEN(input => {call}) c ORDER BY 1, 2"
    expected = [(1, 0, "a b", "[0]"), (1, 1, "c", "[1]"), (1, 2, "d", "[2]"), (3, 0, "x y", "[0]")]
    assert con.sql(transpile(lateral)).fetchall() == expected
    table = f"SELECT d.id, f.index, f.value, f.path FROM docs d, TABLE(FLATTEN(input => {call})) f ORDER BY 1, 2"
    assert con.sql(transpile(table)).fetchall() == expected
    this = con.sql(transpile(f"SELECT c.this FROM docs d, LATERAL FLATTEN(input => {call}) c WHERE d.id = 3"))
    assert this.fetchall() == [(["x y"],)]


def test_flatten_options_other_than_input_are_refused():
    with pytest.raises(SqlTranslationError, match="outer => is not supported"):
        transpile("SELECT c.value FROM docs d, LATERAL FLATTEN(input => SPLIT(d.body, ' '), outer => TRUE) c")
