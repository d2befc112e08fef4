"""Snowflake (Cortex) SQL -> DuckDB SQL calling ``embed_text``: parse, resolve models, rewrite, write.

>>> transpile("SELECT id, SNOWFLAKE.CORTEX.EMBED_TEXT_768('arctic', body) AS v FROM docs",
...           models={"arctic": ("embed_text", 768)}, rewrite=False)
'SELECT id, embed_text(body) AS v FROM docs'
>>> transpile("SELECT VECTOR_COSINE_SIMILARITY(v, [1, 0]::VECTOR(FLOAT, 2)) FROM t")
'SELECT ARRAY_COSINE_SIMILARITY(v, CAST([1, 0] AS FLOAT[2])) FROM t'
>>> transpile("SELECT EMBED_TEXT_768('arctic', body) FROM docs", models={"arctic": ("embed_text", 384)})
Traceback (most recent call last):
...
embedtext.sql.models.DimensionMismatchError: model 'arctic' is mapped to embed_text() returning FLOAT[384], but the query asks for 768 dimensions; ...
"""  # noqa: E501 - doctest lines are compared whole

from __future__ import annotations

from collections.abc import Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel, SqlglotError

from embedtext.sql.dialect import CortexEmbedText, CortexSnowflake, EmbedtextDuckDB, VectorCosineSimilarity
from embedtext.sql.models import EmbedFunction, ModelMap, SqlTranslationError
from embedtext.sql.rewrites import DEFAULT_FUNCTIONS, optimize

#: ``read=`` names that get embedtext's own dialects; any other sqlglot dialect name works too.
READ_DIALECTS = {"snowflake": CortexSnowflake, "duckdb": EmbedtextDuckDB}


def _model_name(node: exp.Expr, call: str) -> str:
    if not (isinstance(node, exp.Literal) and node.is_string):
        raise SqlTranslationError(f"{call}: the model must be a string literal, got {node.sql()}")
    return node.name


#: Snowflake's vector functions -> DuckDB's ``list_*`` ones, which take ``FLOAT[]`` lists and
#: ``FLOAT[n]`` arrays alike (the ``array_*`` ones refuse a list). L1 needs no entry: its DuckDB
#: form is written on lists already (:meth:`EmbedtextDuckDBGenerator.l1_distance_sql`).
LIST_FUNCTIONS = {
    VectorCosineSimilarity: "list_cosine_similarity",
    exp.CosineDistance: "list_cosine_distance",
    exp.DotProduct: "list_inner_product",
    exp.EuclideanDistance: "list_distance",
}


def resolve_models(tree: exp.Expr, models: ModelMap | None) -> exp.Expr:
    """Replace each EMBED_TEXT_768/1024 and AI_EMBED call by the mapped DuckDB function's call.

    Without a map, ``AI_EMBED(model, text)`` becomes ``embed_text(text, 'model')``, which returns
    ``FLOAT[]`` (AI_EMBED names no dimension); the vector functions of such a statement are then
    written with DuckDB's ``list_*`` functions, so that it binds. EMBED_TEXT_768/1024 keep their
    fixed size without a map (``CAST(embed_text(text, 'model', 768) AS FLOAT[768])``).

    Raises:
        UnmappedModelError, DimensionMismatchError: before any row runs.
    """
    unsized = False
    for node in list(tree.find_all(CortexEmbedText, exp.AIEmbed)):
        if isinstance(node, CortexEmbedText):
            name = _model_name(node.args["model"], node.function_name)
            if models is None:
                continue  # the generator writes the fixed-size generic call
            target = models.resolve(name, node.dim_value)
            text = node.this
        else:
            if len(node.expressions) != 2:
                raise SqlTranslationError(f"AI_EMBED takes (model, text), got {len(node.expressions)} arguments")
            name = _model_name(node.expressions[0], "AI_EMBED")
            text = node.expressions[1]
            if models is None:
                unsized = True
                node.replace(exp.Anonymous(this="embed_text", expressions=[text.copy(), exp.Literal.string(name)]))
                continue
            target = models.resolve(name)
        node.replace(embed_call(target, text))
    return vector_functions_on_lists(tree) if unsized else tree


def vector_functions_on_lists(tree: exp.Expr) -> exp.Expr:
    """Write the vector functions of ``tree`` as DuckDB's ``list_*`` functions (:data:`LIST_FUNCTIONS`)."""
    for node in list(tree.find_all(*LIST_FUNCTIONS)):
        node.replace(exp.Anonymous(this=LIST_FUNCTIONS[type(node)], expressions=[node.this, node.expression]))
    return tree


#: Snowflake's FLATTEN columns, in its order: the ones a DuckDB array has no value for are NULL.
FLATTEN_COLUMNS = ("seq", "key", "path", "index", "value", "this")


def lateral_flattens(tree: exp.Expr) -> exp.Expr:
    """Snowflake's ``LATERAL FLATTEN(input => array)`` (or ``TABLE(FLATTEN(...))``) as a DuckDB
    lateral subquery over ``unnest``:
    a row per element, with Snowflake's INDEX (from 0), VALUE, THIS and PATH (``[i]``); SEQ and KEY
    are NULL (an array's elements have no key).

    >>> transpile("SELECT c.value FROM docs d, LATERAL FLATTEN(input => d.tags) c")
    "SELECT c.value FROM docs AS d, LATERAL (SELECT NULL AS seq, NULL AS key, '[' || (GENERATE_SUBSCRIPTS(__array, 1) - 1) || ']' AS path, GENERATE_SUBSCRIPTS(__array, 1) - 1 AS index, UNNEST(__array) AS value, __array AS this FROM (SELECT d.tags AS __array)) AS c(seq, key, path, index, value, this)"
    """  # noqa: E501 - doctest lines are compared whole
    for node in list(tree.find_all(exp.Lateral, exp.TableFromRows)):  # LATERAL FLATTEN, TABLE(FLATTEN)
        explode = node.this
        if not isinstance(explode, exp.Explode) or not isinstance(explode.this, exp.Kwarg):
            continue
        arguments = [explode.this, *explode.expressions]
        unsupported = [a.this.name for a in arguments if a.this.name.lower() != "input"]
        if unsupported:
            raise SqlTranslationError(f"FLATTEN's {', '.join(unsupported)} => is not supported: only input =>")
        index = "GENERATE_SUBSCRIPTS(__array, 1) - 1"
        body = sqlglot.parse_one(
            f"SELECT NULL AS seq, NULL AS key, '[' || ({index}) || ']' AS path, {index} AS index, "
            "UNNEST(__array) AS value, __array AS this FROM (SELECT NULL AS __array)",
            read="duckdb",
        )
        body.find(exp.Subquery).this.selects[0].set("this", explode.this.expression.copy())
        alias = node.args.get("alias")
        name = alias.this.copy() if alias is not None and alias.this is not None else exp.to_identifier("flatten")
        columns = [exp.to_identifier(c) for c in FLATTEN_COLUMNS]
        node.replace(exp.Lateral(this=exp.Subquery(this=body), alias=exp.TableAlias(this=name, columns=columns)))
    return tree


def embed_call(target: EmbedFunction, text: exp.Expr) -> exp.Anonymous:
    """``function(text)`` as an AST node."""
    return exp.Anonymous(this=target.function, expressions=[text.copy()])


def transpile_statements(
    sql: str,
    read: str = "snowflake",
    *,
    models: ModelMap | Mapping | None = None,
    rewrite: bool = True,
    pretty: bool = False,
) -> list[str]:
    """Like :func:`transpile`, one DuckDB statement per input statement."""
    dialect = READ_DIALECTS.get(read.lower(), read)
    try:
        trees = [t for t in sqlglot.parse(sql, read=dialect) if t is not None]
    except SqlglotError as exc:
        raise SqlTranslationError(f"cannot parse the query as {read}: {exc}") from None
    model_map = models if isinstance(models, ModelMap) or models is None else ModelMap(models)
    functions = set(DEFAULT_FUNCTIONS) | {t.function.lower() for t in (model_map or {}).values()}
    out = []
    for tree in trees:
        tree = lateral_flattens(resolve_models(tree, model_map))
        if rewrite:
            tree = optimize(tree, functions)
        try:
            out.append(
                tree.sql(EmbedtextDuckDB, pretty=pretty, normalize_functions=False, unsupported_level=ErrorLevel.RAISE)
            )
        except SqlglotError as exc:
            raise SqlTranslationError(f"cannot write the query for DuckDB: {exc}") from None
    return out


def transpile(
    sql: str,
    read: str = "snowflake",
    *,
    models: ModelMap | Mapping | None = None,
    rewrite: bool = True,
    pretty: bool = False,
) -> str:
    """Translate ``sql`` (Snowflake by default) into DuckDB SQL using embedtext's functions.

    Args:
        sql: one or more statements.
        read: the input dialect: ``"snowflake"`` (Cortex functions understood), ``"duckdb"``
            (only the rewrites apply), or any other sqlglot dialect name.
        models: Snowflake model name -> DuckDB function (:class:`ModelMap`, or a dict of
            ``(function, dim)``). Without it, embed calls become the generic overload, and the
            server must then serve the model under its Snowflake name:
            ``CAST(embed_text(text, 'model', 768) AS FLOAT[768])`` for EMBED_TEXT_768, and
            ``embed_text(text, 'model')`` (``FLOAT[]``: AI_EMBED names no dimension) for AI_EMBED,
            with the statement's vector functions written as DuckDB's ``list_*`` functions.
        rewrite: apply the call-saving rewrites of :mod:`embedtext.sql.rewrites`.
        pretty: format the output.

    Returns:
        DuckDB SQL, statements separated by ``;\\n``.

    Raises:
        SqlTranslationError: unparsable input, an unmapped model, a dimension mismatch, or a
            construct the DuckDB writer cannot express (never silently wrong SQL).
    """
    return ";\n".join(transpile_statements(sql, read, models=models, rewrite=rewrite, pretty=pretty))
