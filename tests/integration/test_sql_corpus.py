"""Snowflake-style queries transpiled and run in DuckDB against a real server (tiny model, 128-d),
each giving the same rows as a hand-written DuckDB equivalent; and the rewrites measured to save calls."""

import math

import duckdb
import pytest
import sqlglot

import embedtext
from embedtext.sql import ModelMap, transpile
from embedtext.sql.rewrites import dedupe_embeds, hoist_constant_embeds, materialize_filtered

M = "AI_EMBED('e5-base-v2', "
MODELS = ModelMap({"e5-base-v2": ("embed_text", 128)})
SETUP = """
CREATE TABLE docs AS SELECT i AS id,
    ['baking', 'pets', 'travel', 'finance'][i % 4 + 1] AS category,
    'title ' || (i % 7) AS title,
    ['bread dough rises', 'the dog is ill', 'a cheap flight', 'stock prices fell'][i % 4 + 1] || ' note ' || i AS body
FROM range(60) t(i);
CREATE TABLE categories AS SELECT * FROM (VALUES ('baking', 'recipes and ovens'), ('pets', 'dogs and cats'),
    ('travel', 'trains and planes'), ('finance', 'money and markets')) v(name, description);
CREATE TABLE doc_vectors AS SELECT id, embed_text(body) AS v FROM docs;
"""

# (Snowflake query, hand-written DuckDB equivalent)
CORPUS = [
    (f"SELECT id, {M}body) AS v FROM docs", "SELECT id, embed_text(body) AS v FROM docs"),
    (
        f"SELECT id, {M}category) AS v FROM docs WHERE id < 30",
        "SELECT id, embed_text(category) AS v FROM docs WHERE id < 30",
    ),
    (
        f"SELECT id, VECTOR_COSINE_SIMILARITY({M}body), {M}'how do I bake bread')) AS s FROM docs ORDER BY s DESC, id LIMIT 5",
        "SELECT id, array_cosine_similarity(embed_text(body), embed_text('how do I bake bread')) AS s FROM docs ORDER BY s DESC, id LIMIT 5",
    ),
    (
        f"SELECT id FROM doc_vectors ORDER BY VECTOR_COSINE_SIMILARITY(v, {M}'sick puppy')) DESC, id LIMIT 3",
        "SELECT id FROM doc_vectors ORDER BY array_cosine_similarity(v, embed_text('sick puppy')) DESC, id LIMIT 3",
    ),
    (
        f"SELECT id, VECTOR_L2_DISTANCE(v, {M}'flights')) AS d FROM doc_vectors ORDER BY d, id LIMIT 4",
        "SELECT id, array_distance(v, embed_text('flights')) AS d FROM doc_vectors ORDER BY d, id LIMIT 4",
    ),
    (
        f"SELECT id, VECTOR_INNER_PRODUCT(v, {M}'markets')) AS p FROM doc_vectors ORDER BY p DESC, id LIMIT 4",
        "SELECT id, array_inner_product(v, embed_text('markets')) AS p FROM doc_vectors ORDER BY p DESC, id LIMIT 4",
    ),
    (  # join
        f"SELECT d.id, c.name, VECTOR_COSINE_SIMILARITY({M}d.body), {M}c.description)) AS s "
        "FROM docs d JOIN categories c ON d.category = c.name WHERE d.id % 3 = 0",
        "SELECT d.id, c.name, array_cosine_similarity(embed_text(d.body), embed_text(c.description)) AS s "
        "FROM docs d JOIN categories c ON d.category = c.name WHERE d.id % 3 = 0",
    ),
    (  # CTE
        f"WITH q AS (SELECT {M}'bread') AS qv) SELECT dv.id, VECTOR_COSINE_SIMILARITY(dv.v, q.qv) AS s "
        "FROM doc_vectors dv CROSS JOIN q ORDER BY s DESC, dv.id LIMIT 5",
        "WITH q AS (SELECT embed_text('bread') AS qv) SELECT dv.id, array_cosine_similarity(dv.v, q.qv) AS s "
        "FROM doc_vectors dv CROSS JOIN q ORDER BY s DESC, dv.id LIMIT 5",
    ),
    (  # subquery in FROM
        f"SELECT id, s FROM (SELECT id, VECTOR_COSINE_SIMILARITY({M}title), {M}'title 3')) AS s FROM docs) WHERE s > 0.99",
        "SELECT id, s FROM (SELECT id, array_cosine_similarity(embed_text(title), embed_text('title 3')) AS s FROM docs) WHERE s > 0.99",
    ),
    (  # window function
        f"SELECT id, category, RANK() OVER (PARTITION BY category ORDER BY VECTOR_COSINE_SIMILARITY({M}body), "
        f"{M}'dough')) DESC, id) AS r FROM docs",
        "SELECT id, category, rank() OVER (PARTITION BY category ORDER BY array_cosine_similarity(embed_text(body), "
        "embed_text('dough')) DESC, id) AS r FROM docs",
    ),
    (  # QUALIFY: best document per category
        f"SELECT category, id FROM docs QUALIFY ROW_NUMBER() OVER (PARTITION BY category ORDER BY "
        f"VECTOR_COSINE_SIMILARITY({M}body), {M}category)) DESC, id) = 1",
        "SELECT category, id FROM docs QUALIFY row_number() OVER (PARTITION BY category ORDER BY "
        "array_cosine_similarity(embed_text(body), embed_text(category)) DESC, id) = 1",
    ),
    (  # aggregate over similarities
        f"SELECT category, AVG(VECTOR_COSINE_SIMILARITY({M}body), {M}'money'))) AS a FROM docs GROUP BY category",
        "SELECT category, avg(array_cosine_similarity(embed_text(body), embed_text('money'))) AS a FROM docs GROUP BY category",
    ),
    (  # GROUP BY the embedded column
        f"SELECT category, VECTOR_COSINE_SIMILARITY({M}category), {M}'pets')) AS s FROM docs GROUP BY category",
        "SELECT category, array_cosine_similarity(embed_text(category), embed_text('pets')) AS s FROM docs GROUP BY category",
    ),
    (  # IN subquery with ORDER BY similarity LIMIT k
        f"SELECT id, body FROM docs WHERE id IN (SELECT id FROM doc_vectors ORDER BY "
        f"VECTOR_COSINE_SIMILARITY(v, {M}'train trip')) DESC, id LIMIT 5)",
        "SELECT id, body FROM docs WHERE id IN (SELECT id FROM doc_vectors ORDER BY "
        "array_cosine_similarity(v, embed_text('train trip')) DESC, id LIMIT 5)",
    ),
    (  # casts to VECTOR
        f"SELECT id, {M}body)::VECTOR(FLOAT, 128) AS v FROM docs WHERE category = 'pets'",
        "SELECT id, CAST(embed_text(body) AS FLOAT[128]) AS v FROM docs WHERE category = 'pets'",
    ),
    (
        "SELECT VECTOR_COSINE_SIMILARITY([1, 2, 3]::VECTOR(FLOAT, 3), [1, 2, 4]::VECTOR(FLOAT, 3)) AS s",
        "SELECT array_cosine_similarity([1, 2, 3]::FLOAT[3], [1, 2, 4]::FLOAT[3]) AS s",
    ),
    (  # IFF and a threshold
        f"SELECT id, IFF(VECTOR_COSINE_SIMILARITY({M}body), {M}'bread')) > 0.9, 'close', 'far') AS k FROM docs",
        "SELECT id, CASE WHEN array_cosine_similarity(embed_text(body), embed_text('bread')) > 0.9 THEN 'close' ELSE 'far' END AS k FROM docs",
    ),
    (  # UNION ALL of two searches
        f"SELECT 'a' AS q, id FROM (SELECT id FROM doc_vectors ORDER BY VECTOR_COSINE_SIMILARITY(v, {M}'oven')) DESC, id LIMIT 2) "
        f"UNION ALL SELECT 'b', id FROM (SELECT id FROM doc_vectors ORDER BY VECTOR_COSINE_SIMILARITY(v, {M}'cat')) DESC, id LIMIT 2)",
        "SELECT 'a' AS q, id FROM (SELECT id FROM doc_vectors ORDER BY array_cosine_similarity(v, embed_text('oven')) DESC, id LIMIT 2) "
        "UNION ALL SELECT 'b', id FROM (SELECT id FROM doc_vectors ORDER BY array_cosine_similarity(v, embed_text('cat')) DESC, id LIMIT 2)",
    ),
    (  # self-join: nearest other document
        "SELECT a.id, b.id AS nearest FROM doc_vectors a JOIN doc_vectors b ON a.id <> b.id WHERE a.id < 5 "
        "QUALIFY ROW_NUMBER() OVER (PARTITION BY a.id ORDER BY VECTOR_COSINE_SIMILARITY(a.v, b.v) DESC, b.id) = 1",
        "SELECT a.id, b.id AS nearest FROM doc_vectors a JOIN doc_vectors b ON a.id <> b.id WHERE a.id < 5 "
        "QUALIFY row_number() OVER (PARTITION BY a.id ORDER BY array_cosine_similarity(a.v, b.v) DESC, b.id) = 1",
    ),
    (  # embedding an expression
        f"SELECT id, {M}title || ': ' || body) AS v FROM docs WHERE id BETWEEN 10 AND 20",
        "SELECT id, embed_text(title || ': ' || body) AS v FROM docs WHERE id BETWEEN 10 AND 20",
    ),
    (  # NULL and empty texts
        f"SELECT x, {M}x) IS NULL AS n FROM (SELECT NULL AS x UNION ALL SELECT '' UNION ALL SELECT 'a')",
        "SELECT x, embed_text(x) IS NULL AS n FROM (SELECT NULL AS x UNION ALL SELECT '' UNION ALL SELECT 'a')",
    ),
    (  # the query: two embeds of one row, nearest first
        f"SELECT id, VECTOR_L2_DISTANCE({M}body), {M}title)) AS d FROM docs ORDER BY d, id LIMIT 10",
        "SELECT id, array_distance(embed_text(body), embed_text(title)) AS d FROM docs ORDER BY d, id LIMIT 10",
    ),
    (
        f"SELECT id, VECTOR_L1_DISTANCE(v, {M}'flights')) AS d FROM doc_vectors ORDER BY d, id LIMIT 4",
        "SELECT id, list_sum(list_transform(list_zip(v, embed_text('flights')), lambda p: abs(p[1] - p[2]))) AS d "
        "FROM doc_vectors ORDER BY d, id LIMIT 4",
    ),
    (  # DISTINCT, COUNT with a similarity filter
        f"SELECT COUNT(DISTINCT category) AS n FROM docs WHERE VECTOR_COSINE_SIMILARITY({M}body), {M}'stock')) > 0.5",
        "SELECT count(DISTINCT category) AS n FROM docs WHERE array_cosine_similarity(embed_text(body), embed_text('stock')) > 0.5",
    ),
]


@pytest.fixture(scope="module")
def db(servers):
    con = duckdb.connect()
    reg = embedtext.register(con, servers.tiny.target)
    for statement in SETUP.split(";"):
        if statement.strip():
            con.execute(statement).fetchall()
    yield con, reg
    con.close()


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-5)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _key(row):
    return tuple((x is None, round(x, 3) if isinstance(x, float) else str(x)) for x in row)


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 20


@pytest.mark.parametrize("mode", ["plain", "rewritten", "unmapped"])
@pytest.mark.parametrize(("snowflake", "duck"), CORPUS, ids=[f"q{i:02d}" for i in range(len(CORPUS))])
def test_query_gives_the_hand_written_rows(db, snowflake, duck, mode):
    """Mapped, the embeds return FLOAT[128]; unmapped, ``embed_text(text, 'tiny')`` returns FLOAT[]
    (AI_EMBED names no dimension), and the translation must still bind and give the same rows."""
    con, _ = db
    if mode == "unmapped":
        translated = transpile(snowflake.replace(M, "AI_EMBED('tiny', "))
    else:
        translated = transpile(snowflake, models=MODELS, rewrite=mode == "rewritten")
    got = con.sql(translated).fetchall()
    want = con.sql(duck).fetchall()
    assert got, "every corpus query returns rows"
    ordered = sqlglot.parse_one(duck, read="duckdb").args.get("order") is not None  # a top-level ORDER BY
    if not ordered:
        got, want = sorted(got, key=_key), sorted(want, key=_key)
    assert len(got) == len(want)
    assert all(_same(g, w) for g, w in zip(got, want)), translated


def _calls(con, reg, sql):
    calls, sent = reg.embedder.calls, reg.embedder.rows_sent
    rows = con.sql(sql).fetchall()
    return rows, reg.embedder.calls - calls, reg.embedder.rows_sent - sent


def _rewritten(rewrite, sql):
    return rewrite(sqlglot.parse_one(sql, read="duckdb")).sql("duckdb", normalize_functions=False)


@pytest.fixture(scope="module")
def big(db):
    con, reg = db
    con.execute(
        "CREATE TABLE big AS SELECT i AS id, 'category ' || (i % 25) AS category, 'text number ' || i AS body FROM range(10000) t(i)"
    ).fetchall()
    return con, reg


def test_dedupe_embeds_each_distinct_value_once_and_keeps_row_order(big):
    con, reg = big
    sql = "SELECT id, embed_text(category) AS v FROM big"
    before, calls_before, sent_before = _calls(con, reg, sql)
    after, calls_after, sent_after = _calls(con, reg, _rewritten(dedupe_embeds, sql))
    assert sent_before == 25 * calls_before and calls_before >= 5  # once per value per chunk
    assert sent_after == 25
    assert [r[0] for r in after] == [r[0] for r in before]  # DuckDB keeps the scan's order
    assert all(_same(a, b) for a, b in zip(after, before))


def test_materialize_filtered_hands_full_chunks(big):
    con, reg = big
    sql = "SELECT id, embed_text(body) AS v FROM big WHERE id % 10 = 0"
    before, calls_before, _ = _calls(con, reg, sql)
    after, calls_after, _ = _calls(con, reg, _rewritten(materialize_filtered, sql))
    assert calls_before >= 4 and calls_after == 1  # 1000 rows fit one 2048-row chunk
    assert [r[0] for r in after] == [r[0] for r in before]
    assert all(_same(a, b) for a, b in zip(after, before))


def test_hoisted_constant_is_embedded_once(big):
    con, reg = big
    sql = "SELECT id, array_cosine_similarity(v, embed_text('bread')) AS s FROM doc_vectors ORDER BY s DESC, id LIMIT 3"
    before, calls_before, _ = _calls(con, reg, sql)
    after, calls_after, _ = _calls(con, reg, _rewritten(hoist_constant_embeds, sql))
    assert calls_after == 1 and calls_before >= 1
    assert all(_same(a, b) for a, b in zip(after, before))


def test_embed_text_768_and_vector_ddl_run_end_to_end(arctic_server):
    """SNOWFLAKE.CORTEX.EMBED_TEXT_768 on a served 768-d model, and VECTOR(FLOAT, 768) DDL."""
    con = duckdb.connect()
    embedtext.register(con, arctic_server.target, name="arctic_embed", model="arctic-like")
    for statement in SETUP.split(";")[:2]:
        if statement.strip():
            con.execute(statement).fetchall()
    models = ModelMap({"snowflake-arctic-embed-m-v1.5": ("arctic_embed", 768)})
    e768 = "SNOWFLAKE.CORTEX.EMBED_TEXT_768('snowflake-arctic-embed-m-v1.5', "
    snowflake = (
        f"SELECT id, VECTOR_COSINE_SIMILARITY({e768}body), {e768}'how do I bake bread')) AS s "
        "FROM docs ORDER BY s DESC, id LIMIT 5"
    )
    duck = (
        "SELECT id, array_cosine_similarity(arctic_embed(body), arctic_embed('how do I bake bread')) AS s "
        "FROM docs ORDER BY s DESC, id LIMIT 5"
    )
    for rewrite in (False, True):
        got = con.sql(transpile(snowflake, models=models, rewrite=rewrite)).fetchall()
        want = con.sql(duck).fetchall()
        assert len(got) == 5 and all(_same(g, w) for g, w in zip(got, want))
    for statement in transpile(
        f"CREATE TABLE vecs (id INT, v VECTOR(FLOAT, 768)); INSERT INTO vecs SELECT id, {e768}body) FROM docs",
        models=models,
    ).split(";\n"):
        con.execute(statement).fetchall()
    assert con.sql("SELECT count(*), any_value(typeof(v)) FROM vecs").fetchall() == [(60, "FLOAT[768]")]
