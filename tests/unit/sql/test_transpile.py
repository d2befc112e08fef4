"""Snowflake (Cortex) -> DuckDB: input -> expected fixture pairs, and the errors raised before any row runs."""

import pytest
import sqlglot

from embedtext.sql import DimensionMismatchError, ModelMap, SqlTranslationError, UnmappedModelError, transpile
from embedtext.sql.dialect import CortexSnowflake

MODELS = ModelMap(
    {
        "snowflake-arctic-embed-m-v1.5": ("embed_768", 768),
        "snowflake-arctic-embed-l-v2.0": ("embed_1024", 1024, "arctic-l"),
        "e5-base-v2": ("embed_text", 128),
    }
)

# (Snowflake input, DuckDB expected), rewrites off: the translation alone.
TRANSLATIONS = [
    (
        "SELECT SNOWFLAKE.CORTEX.EMBED_TEXT_768('snowflake-arctic-embed-m-v1.5', body) AS v FROM docs",
        "SELECT embed_768(body) AS v FROM docs",
    ),
    (
        "SELECT snowflake.cortex.embed_text_1024('snowflake-arctic-embed-l-v2.0', body) FROM docs",
        "SELECT embed_1024(body) FROM docs",
    ),
    (
        "SELECT EMBED_TEXT_768('snowflake-arctic-embed-m-v1.5', title || ' ' || body) FROM docs",
        "SELECT embed_768(title || ' ' || body) FROM docs",
    ),
    ("SELECT AI_EMBED('e5-base-v2', body) FROM docs", "SELECT embed_text(body) FROM docs"),
    ("SELECT AI_EMBED('E5-BASE-V2', body) FROM docs", "SELECT embed_text(body) FROM docs"),
    ("SELECT VECTOR_COSINE_SIMILARITY(a, b) FROM t", "SELECT ARRAY_COSINE_SIMILARITY(a, b) FROM t"),
    ("SELECT VECTOR_INNER_PRODUCT(a, b) FROM t", "SELECT ARRAY_INNER_PRODUCT(a, b) FROM t"),
    ("SELECT VECTOR_L2_DISTANCE(a, b) FROM t", "SELECT ARRAY_DISTANCE(a, b) FROM t"),
    ("SELECT a::VECTOR(FLOAT, 768) FROM t", "SELECT CAST(a AS FLOAT[768]) FROM t"),
    ("SELECT CAST(a AS VECTOR(INT, 3)) FROM t", "SELECT CAST(a AS INTEGER[3]) FROM t"),
    ("SELECT [1, 2]::VECTOR(FLOAT, 2)", "SELECT CAST([1, 2] AS FLOAT[2])"),
    (
        "CREATE TABLE doc_vectors (id INT, v VECTOR(FLOAT, 768), tags VECTOR(INT, 4))",
        "CREATE TABLE doc_vectors (id INT, v FLOAT[768], tags INTEGER[4])",
    ),
    (
        "SELECT id FROM doc_vectors ORDER BY VECTOR_COSINE_SIMILARITY(v, "
        "SNOWFLAKE.CORTEX.EMBED_TEXT_768('snowflake-arctic-embed-m-v1.5', 'bread')) DESC LIMIT 5",
        "SELECT id FROM doc_vectors ORDER BY ARRAY_COSINE_SIMILARITY(v, embed_768('bread')) DESC NULLS FIRST LIMIT 5",
    ),
    (
        "WITH q AS (SELECT AI_EMBED('e5-base-v2', 'cats') AS qv) SELECT d.id FROM docs d, q",
        "WITH q AS (SELECT embed_text('cats') AS qv) SELECT d.id FROM docs AS d, q",
    ),
]


@pytest.mark.parametrize(("source", "expected"), TRANSLATIONS)
def test_translation(source, expected):
    assert transpile(source, models=MODELS, rewrite=False) == expected


A = "AI_EMBED('snowflake-arctic-embed-m-v1.5', "
A_OUT = "'snowflake-arctic-embed-m-v1.5')"

# Without a map, AI_EMBED returns FLOAT[] (it names no dimension), and DuckDB's array_* functions
# refuse a list: every vector function of such a statement is written as a list_* one.
UNMAPPED = [
    (
        f"SELECT id, VECTOR_L2_DISTANCE({A}body), {A}title)) AS d FROM docs ORDER BY d LIMIT 10",
        f"SELECT id, list_distance(embed_text(body, {A_OUT}, embed_text(title, {A_OUT}) AS d FROM docs ORDER BY d LIMIT 10",
    ),
    (
        f"SELECT VECTOR_COSINE_SIMILARITY(v, {A}'bread')) FROM t",
        f"SELECT list_cosine_similarity(v, embed_text('bread', {A_OUT}) FROM t",
    ),
    (
        f"SELECT VECTOR_INNER_PRODUCT({A}body), v) FROM t",
        f"SELECT list_inner_product(embed_text(body, {A_OUT}, v) FROM t",
    ),
    (  # a vector function that touches no AI_EMBED in a statement that has one: lists too
        f"WITH q AS (SELECT {A}'cats') AS qv) SELECT VECTOR_COSINE_SIMILARITY(d.v, q.qv) FROM d, q",
        f"WITH q AS (SELECT embed_text('cats', {A_OUT} AS qv) SELECT list_cosine_similarity(d.v, q.qv) FROM d, q",
    ),
    (
        f"SELECT VECTOR_L1_DISTANCE({A}body), v) FROM t",
        f"SELECT list_transform([{{'a': embed_text(body, {A_OUT}, 'b': v}}], lambda l1_pair: CASE WHEN "
        "len(l1_pair.a) <> len(l1_pair.b) THEN error('VECTOR_L1_DISTANCE: vectors of different dimensions') ELSE "
        "list_sum(list_transform(list_zip(l1_pair.a, l1_pair.b), lambda l1_xy: abs(l1_xy[1] - l1_xy[2]))) END)[1] FROM t",
    ),
    (  # EMBED_TEXT_768 names its dimension: arrays stay
        "SELECT VECTOR_COSINE_SIMILARITY(v, EMBED_TEXT_768('m', 'bread')) FROM t",
        "SELECT ARRAY_COSINE_SIMILARITY(v, CAST(embed_text('bread', 'm', 768) AS FLOAT[768])) FROM t",
    ),
]


@pytest.mark.parametrize(("source", "expected"), UNMAPPED)
def test_without_a_map_vector_functions_take_lists(source, expected):
    assert transpile(source, rewrite=False) == expected


def test_with_a_map_ai_embed_keeps_arrays():
    out = transpile(f"SELECT VECTOR_L2_DISTANCE({A}body), v) FROM t", models=MODELS, rewrite=False)
    assert out == "SELECT ARRAY_DISTANCE(embed_768(body), v) FROM t"


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [("[1, 2, 3]", "[1, 2, 5]", 2.0), ("[0.5, -1]", "[0, 1]", 2.5), ("NULL", "[1, 2, 5]", None)],
)
def test_l1_distance_runs_in_duckdb(a, b, expected):
    duckdb = pytest.importorskip("duckdb")
    n = 3 if b.count(",") == 2 else 2
    sql = transpile(f"SELECT VECTOR_L1_DISTANCE({a}::VECTOR(FLOAT, {n}), {b}::VECTOR(FLOAT, {n}))")
    assert duckdb.sql(sql).fetchall() == [(expected,)]


def test_l1_distance_of_unequal_lengths_fails_in_duckdb():
    duckdb = pytest.importorskip("duckdb")
    sql = transpile("SELECT VECTOR_L1_DISTANCE(a, b) FROM (SELECT [1, 2]::FLOAT[] AS a, [1, 2, 3]::FLOAT[] AS b)")
    with pytest.raises(duckdb.Error, match="different dimensions"):
        duckdb.sql(sql).fetchall()


def test_without_a_map_embeds_become_the_generic_overload():
    out = transpile("SELECT EMBED_TEXT_768('arctic', body), AI_EMBED('arctic', body) FROM d", rewrite=False)
    assert out == "SELECT CAST(embed_text(body, 'arctic', 768) AS FLOAT[768]), embed_text(body, 'arctic') FROM d"


def test_stock_sqlglot_gets_the_sign_wrong_and_we_do_not():
    # The bug this dialect exists for: similarity read as a distance.
    stock = sqlglot.transpile("SELECT VECTOR_COSINE_SIMILARITY(a, b)", read="snowflake", write="duckdb")[0]
    assert "DISTANCE" in stock.upper()
    assert "SIMILARITY" in transpile("SELECT VECTOR_COSINE_SIMILARITY(a, b)")


def test_snowflake_round_trip():
    sql = "SELECT EMBED_TEXT_1024('m', body), VECTOR_COSINE_SIMILARITY(a, b) FROM d"
    assert sqlglot.parse_one(f"SELECT SNOWFLAKE.CORTEX.{sql[7:]}", read=CortexSnowflake).sql(CortexSnowflake) == sql


def test_several_statements():
    out = transpile(
        "CREATE TABLE t (v VECTOR(FLOAT, 2)); SELECT AI_EMBED('e5-base-v2', 'x')", models=MODELS, rewrite=False
    )
    assert out == "CREATE TABLE t (v FLOAT[2]);\nSELECT embed_text('x')"


@pytest.mark.parametrize(
    ("source", "error", "message"),
    [
        ("SELECT EMBED_TEXT_768('e5-base-v2', body) FROM d", DimensionMismatchError, "FLOAT[128]"),
        ("SELECT EMBED_TEXT_1024('snowflake-arctic-embed-m-v1.5', body) FROM d", DimensionMismatchError, "1024"),
        ("SELECT AI_EMBED('nv-embed-qa-4', body) FROM d", UnmappedModelError, "nv-embed-qa-4"),
        ("SELECT EMBED_TEXT_768(model_col, body) FROM d", SqlTranslationError, "string literal"),
        ("SELECT EMBED_TEXT_768('e5-base-v2') FROM d", SqlTranslationError, "2 arguments"),
        ("SELECT FROM WHERE", SqlTranslationError, "cannot parse"),
    ],
)
def test_errors_before_any_row(source, error, message):
    with pytest.raises(error, match=message.replace("[", r"\[")):
        transpile(source, models=MODELS)


def test_wildcard_entry_maps_every_model():
    models = ModelMap({"*": ("embed_text", 768)})
    assert transpile("SELECT EMBED_TEXT_768('anything', b) FROM d", models=models, rewrite=False) == (
        "SELECT embed_text(b) FROM d"
    )


def test_check_registered():
    MODELS.check_registered({"embed_768": 768, "embed_1024": 1024, "embed_text": 128})
    with pytest.raises(UnmappedModelError, match="embed_1024"):
        MODELS.check_registered({"embed_768": 768, "embed_text": 128})
    with pytest.raises(DimensionMismatchError, match=r"FLOAT\[384\]"):
        MODELS.check_registered({"embed_768": 768, "embed_1024": 1024, "embed_text": 384})


@pytest.mark.parametrize("spec", ["x", "x=embed", "x=embed:abc", "=embed:3", "x=1bad:3", "x=embed:0"])
def test_bad_map_specs(spec):
    with pytest.raises(ValueError):
        ModelMap.parse([spec])
