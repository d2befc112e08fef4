"""The call-saving rewrites: input -> expected fixture pairs, and the queries they must leave alone."""

import pytest
import sqlglot

from embedtext.sql.rewrites import dedupe_embeds, hoist_constant_embeds, materialize_filtered, optimize


def _apply(rewrite, sql, functions=("embed_text",)):
    return rewrite(sqlglot.parse_one(sql, read="duckdb"), functions).sql("duckdb", normalize_functions=False)


D = "__embedtext_distinct_0"
DEDUPE = [
    (
        "SELECT id, embed_text(category) AS v FROM docs",
        f"SELECT id, {D}.__vector AS v FROM docs LEFT JOIN (SELECT __text, embed_text(__text) AS __vector "
        f"FROM (SELECT DISTINCT category AS __text FROM docs)) AS {D} ON category = {D}.__text",
    ),
    (  # the filter goes into the DISTINCT too; a bare projection keeps its column name
        "SELECT embed_text(d.category) FROM docs AS d WHERE d.id > 3",
        f'SELECT {D}.__vector AS "embed_text(d.category)" FROM docs AS d LEFT JOIN (SELECT __text, '
        f"embed_text(__text) AS __vector FROM (SELECT DISTINCT d.category AS __text FROM docs AS d WHERE d.id > 3)) "
        f"AS {D} ON d.category = {D}.__text WHERE d.id > 3",
    ),
    (  # one join per distinct call; the same call twice shares it; * is qualified
        "SELECT *, embed_text(a) AS x, embed_text(a) AS y, embed_256(b, 'm') AS z FROM t",
        f"SELECT t.*, {D}.__vector AS x, {D}.__vector AS y, __embedtext_distinct_1.__vector AS z FROM t "
        f"LEFT JOIN (SELECT __text, embed_text(__text) AS __vector FROM (SELECT DISTINCT a AS __text FROM t)) "
        f"AS {D} ON a = {D}.__text LEFT JOIN (SELECT __text, embed_256(__text, 'm') AS __vector FROM "
        f"(SELECT DISTINCT b AS __text FROM t)) AS __embedtext_distinct_1 ON b = __embedtext_distinct_1.__text",
    ),
]

UNTOUCHED_BY_DEDUPE = [
    "SELECT embed_text(body) FROM docs LIMIT 10",  # embeds fewer rows as it is
    "SELECT category, embed_text(category) FROM docs GROUP BY category",
    "SELECT embed_text(a.body) FROM a JOIN b ON a.id = b.id",
    "SELECT embed_text('constant')",
    "SELECT embed_text(body, model_col) FROM docs",  # per-row model: not shareable
    "SELECT (SELECT embed_text(x.body) FROM x WHERE x.id = d.id) FROM d",  # correlated
    "SELECT upper(body) FROM docs",
]

MATERIALIZE = [
    (
        "SELECT id, embed_text(body) AS v FROM docs WHERE id % 10 = 0",
        "WITH __embedtext_filtered_0 AS MATERIALIZED (SELECT * FROM docs WHERE id % 10 = 0 ORDER BY rowid) "
        "SELECT id, embed_text(body) AS v FROM __embedtext_filtered_0 AS docs",
    ),
    (
        "SELECT d.id, embed_text(d.body) FROM docs AS d WHERE d.lang = 'en'",
        "WITH __embedtext_filtered_0 AS MATERIALIZED (SELECT * FROM docs AS d WHERE d.lang = 'en' ORDER BY rowid) "
        "SELECT d.id, embed_text(d.body) FROM __embedtext_filtered_0 AS d",
    ),
]

UNTOUCHED_BY_MATERIALIZE = [
    "SELECT embed_text(body) FROM docs",  # no filter: chunks are full already
    "SELECT embed_text(body) FROM docs WHERE id > 3 LIMIT 5",
    "WITH c AS (SELECT * FROM docs) SELECT embed_text(body) FROM c WHERE id > 3",  # a CTE has no rowid
    "SELECT id FROM docs WHERE id > 3",
]

C = "__embedtext_constant_0"
HOIST = [
    (
        "SELECT id, array_cosine_similarity(v, embed_text('bread')) AS s FROM dv ORDER BY s DESC LIMIT 3",
        f"WITH {C} AS MATERIALIZED (SELECT embed_text('bread') AS __vector) SELECT id, "
        f"array_cosine_similarity(v, (SELECT __vector FROM {C})) AS s FROM dv ORDER BY s DESC LIMIT 3",
    ),
    (  # the same constant twice: one CTE; constants go first in an existing WITH (its CTEs may use them)
        "WITH x AS (SELECT 1) SELECT embed_text('a'), embed_text('a') AS b, embed_text('c') AS c FROM x",
        f"WITH {C} AS MATERIALIZED (SELECT embed_text('a') AS __vector), __embedtext_constant_1 "
        f"AS MATERIALIZED (SELECT embed_text('c') AS __vector), x AS (SELECT 1) SELECT (SELECT __vector FROM {C}) AS "
        f"\"embed_text('a')\", (SELECT __vector FROM {C}) AS b, (SELECT __vector FROM __embedtext_constant_1) AS c FROM x",
    ),
    (
        "CREATE TABLE q AS SELECT embed_text('a') AS v",
        f"CREATE TABLE q AS WITH {C} AS MATERIALIZED (SELECT embed_text('a') AS __vector) "
        f"SELECT (SELECT __vector FROM {C}) AS v",
    ),
]

UNTOUCHED_BY_HOIST = ["SELECT embed_text(body) FROM docs", "SELECT embed_text(NULL)", "SELECT lower('a')"]


@pytest.mark.parametrize(("source", "expected"), DEDUPE)
def test_dedupe(source, expected):
    assert _apply(dedupe_embeds, source, ("embed_text", "embed_256")) == expected


@pytest.mark.parametrize("source", UNTOUCHED_BY_DEDUPE)
def test_dedupe_leaves_alone(source):
    assert _apply(dedupe_embeds, source) == sqlglot.parse_one(source, read="duckdb").sql(
        "duckdb", normalize_functions=False
    )


@pytest.mark.parametrize(("source", "expected"), MATERIALIZE)
def test_materialize_filtered(source, expected):
    assert _apply(materialize_filtered, source) == expected


@pytest.mark.parametrize("source", UNTOUCHED_BY_MATERIALIZE)
def test_materialize_leaves_alone(source):
    assert _apply(materialize_filtered, source) == sqlglot.parse_one(source, read="duckdb").sql(
        "duckdb", normalize_functions=False
    )


@pytest.mark.parametrize(("source", "expected"), HOIST)
def test_hoist_constants(source, expected):
    assert _apply(hoist_constant_embeds, source) == expected


@pytest.mark.parametrize("source", UNTOUCHED_BY_HOIST)
def test_hoist_leaves_alone(source):
    assert _apply(hoist_constant_embeds, source) == sqlglot.parse_one(source, read="duckdb").sql(
        "duckdb", normalize_functions=False
    )


@pytest.mark.parametrize("source", [s for s, _ in DEDUPE + MATERIALIZE + HOIST])
def test_optimize_is_idempotent(source):
    once = _apply(optimize, source, ("embed_text", "embed_256"))
    assert _apply(optimize, once, ("embed_text", "embed_256")) == once
