"""sqlglot dialects for embedtext: Snowflake Cortex in, DuckDB with ``embed_text`` out.

Two :class:`sqlglot.Dialect` subclasses, registered with sqlglot under their lowercased class
names (``"cortexsnowflake"``, ``"embedtextduckdb"``), and the expression classes they share:

* :class:`CortexSnowflake` reads Snowflake SQL. It fixes what stock sqlglot gets wrong here:
  ``VECTOR_COSINE_SIMILARITY`` becomes :class:`VectorCosineSimilarity` (stock sqlglot reads it as
  ``CosineDistance``, the opposite sign), ``EMBED_TEXT_768``/``EMBED_TEXT_1024`` become
  :class:`CortexEmbedText`, also when qualified as ``SNOWFLAKE.CORTEX.EMBED_TEXT_768(...)``
  (which stock sqlglot parses as a ``Dot`` around an ``Anonymous`` call), and ``AI_EMBED`` keeps
  sqlglot's own ``exp.AIEmbed``. ``SPLIT_TEXT_RECURSIVE_CHARACTER`` (qualified or not) becomes
  :class:`SplitTextRecursiveCharacter`.
* :class:`EmbedtextDuckDB` writes DuckDB: the vector functions become DuckDB's ``array_*``
  functions (which need ``FLOAT[n]`` arrays: a Snowflake ``VECTOR`` is fixed-size) and
  ``VECTOR(FLOAT, n)`` becomes ``FLOAT[n]`` (``VECTOR(INT, n)`` becomes ``INTEGER[n]``).
  An embed call that :func:`embedtext.sql.transpile` did not resolve through a
  :class:`~embedtext.sql.models.ModelMap` is written as the generic overload registered by
  ``embedtext.register``: ``CAST(embed_text(text, 'model', dim) AS FLOAT[dim])``. A text split
  becomes ``split_text_recursive_character(...)``, registered by ``embedtext.udf.text_split``.

>>> import sqlglot
>>> sqlglot.transpile("SELECT VECTOR_COSINE_SIMILARITY(a, b) FROM t", read=CortexSnowflake, write=EmbedtextDuckDB)
['SELECT ARRAY_COSINE_SIMILARITY(a, b) FROM t']
>>> sqlglot.transpile("SELECT v::VECTOR(FLOAT, 768) FROM t", read=CortexSnowflake, write=EmbedtextDuckDB)
['SELECT CAST(v AS FLOAT[768]) FROM t']
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.dialects.snowflake import Snowflake
from sqlglot.errors import ParseError
from sqlglot.generators.duckdb import DuckDBGenerator
from sqlglot.generators.snowflake import SnowflakeGenerator
from sqlglot.parsers.snowflake import SnowflakeParser

from embedtext.sql.text_split import SQL_FUNCTION_NAME

#: Snowflake's fixed-size embedding functions and the dimension each returns.
CORTEX_EMBED_DIMS = {"EMBED_TEXT_768": 768, "EMBED_TEXT_1024": 1024}

#: The schema prefix Snowflake puts in front of Cortex functions.
CORTEX_SCHEMA = ("SNOWFLAKE", "CORTEX")


class CortexEmbedText(exp.Expression, exp.Func):
    """``EMBED_TEXT_768(model, text)`` / ``EMBED_TEXT_1024(model, text)``: ``dim`` says which."""

    arg_types = {"model": True, "this": True, "dim": True}
    _sql_names = list(CORTEX_EMBED_DIMS)

    @property
    def dim_value(self) -> int:
        return int(self.args["dim"].name)

    @property
    def function_name(self) -> str:
        return f"EMBED_TEXT_{self.dim_value}"


class VectorCosineSimilarity(exp.Expression, exp.Func):
    """Cosine similarity of two vectors (1 for equal directions): not sqlglot's CosineDistance."""

    arg_types = {"this": True, "expression": True}
    _sql_names = ["VECTOR_COSINE_SIMILARITY"]


class SplitTextRecursiveCharacter(exp.Expression, exp.Func):
    """``SPLIT_TEXT_RECURSIVE_CHARACTER(text, format, chunk_size[, overlap[, separators]])``: an array of chunks."""

    arg_types = {"this": True, "format": True, "chunk_size": True, "overlap": False, "separators": False}
    _sql_names = ["SPLIT_TEXT_RECURSIVE_CHARACTER"]


def _split_text_builder(args: list) -> SplitTextRecursiveCharacter:
    if not 3 <= len(args) <= 5:
        raise ParseError(
            "SPLIT_TEXT_RECURSIVE_CHARACTER takes 3 to 5 arguments "
            f"(text, format, chunk_size[, overlap[, separators]]), got {len(args)}"
        )
    return SplitTextRecursiveCharacter.from_arg_list(args)


def _cortex_embed_builder(dim: int):
    def build(args: list) -> CortexEmbedText:
        if len(args) != 2:
            raise ParseError(f"EMBED_TEXT_{dim} takes 2 arguments (model, text), got {len(args)}")
        return CortexEmbedText(model=args[0], this=args[1], dim=exp.Literal.number(dim))

    return build


def _dotted_name(node: exp.Expr) -> tuple[str, ...] | None:
    """``SNOWFLAKE.CORTEX`` as ("SNOWFLAKE", "CORTEX"), whatever the nesting of Dot/Column."""
    if isinstance(node, exp.Identifier):
        return (node.name.upper(),)
    if isinstance(node, exp.Column):
        return tuple(p.name.upper() for p in node.parts)
    if isinstance(node, exp.Dot):
        left, right = _dotted_name(node.this), _dotted_name(node.expression)
        return left + right if left is not None and right is not None else None
    return None


class CortexSnowflakeParser(SnowflakeParser):
    """Snowflake's parser plus the Cortex functions (one FUNCTIONS entry each)."""

    FUNCTIONS = {
        **SnowflakeParser.FUNCTIONS,
        "VECTOR_COSINE_SIMILARITY": VectorCosineSimilarity.from_arg_list,
        **{name: _cortex_embed_builder(dim) for name, dim in CORTEX_EMBED_DIMS.items()},
        "SPLIT_TEXT_RECURSIVE_CHARACTER": _split_text_builder,
    }

    def _parse_column_ops(self, this):  # type: ignore[override]
        # sqlglot parses a schema-qualified call as Dot(SNOWFLAKE.CORTEX, Anonymous(...)); turn
        # the ones naming a function we know back into that function's node.
        node = super()._parse_column_ops(this)
        if (
            isinstance(node, exp.Dot)
            and isinstance(node.expression, exp.Anonymous)
            and _dotted_name(node.this) == CORTEX_SCHEMA
        ):
            call = node.expression
            builder = self.FUNCTIONS.get(call.name.upper())
            if builder is not None:
                return builder(list(call.expressions))
        return node


class CortexSnowflakeGenerator(SnowflakeGenerator):
    """Snowflake's generator, writing the Cortex nodes back as Snowflake spells them."""

    TRANSFORMS = {
        **SnowflakeGenerator.TRANSFORMS,
        VectorCosineSimilarity: lambda self, e: self.func("VECTOR_COSINE_SIMILARITY", e.this, e.expression),
        CortexEmbedText: lambda self, e: self.func(e.function_name, e.args["model"], e.this),
        SplitTextRecursiveCharacter: lambda self, e: self.func("SPLIT_TEXT_RECURSIVE_CHARACTER", *_split_args(e)),
    }


def _split_args(e: SplitTextRecursiveCharacter) -> list:
    return [e.args.get(key) for key in SplitTextRecursiveCharacter.arg_types]


class CortexSnowflake(Snowflake):
    """Snowflake, reading Cortex embedding and vector functions correctly.

    >>> import sqlglot
    >>> sqlglot.parse_one("SELECT SNOWFLAKE.CORTEX.EMBED_TEXT_768('m', body) FROM d", read=CortexSnowflake).sql(CortexSnowflake)
    "SELECT EMBED_TEXT_768('m', body) FROM d"
    """  # noqa: E501 - doctest lines are compared whole

    Parser = CortexSnowflakeParser
    Generator = CortexSnowflakeGenerator


def _vector_type_sql(self: DuckDBGenerator, expression: exp.DataType) -> str:
    element, size = expression.expressions
    kind = "INTEGER" if element.is_type(*exp.DataType.INTEGER_TYPES) else "FLOAT"
    return f"{kind}[{self.sql(size)}]"


class EmbedtextDuckDBGenerator(DuckDBGenerator):
    """DuckDB's generator plus one entry per function/type of the Snowflake vector API."""

    TRANSFORMS = {
        **DuckDBGenerator.TRANSFORMS,
        VectorCosineSimilarity: lambda self, e: self.func("ARRAY_COSINE_SIMILARITY", e.this, e.expression),
        exp.CosineDistance: lambda self, e: self.func("ARRAY_COSINE_DISTANCE", e.this, e.expression),
        exp.DotProduct: lambda self, e: self.func("ARRAY_INNER_PRODUCT", e.this, e.expression),
        exp.EuclideanDistance: lambda self, e: self.func("ARRAY_DISTANCE", e.this, e.expression),
        exp.ManhattanDistance: lambda self, e: self.l1_distance_sql(e.this, e.expression),
        CortexEmbedText: lambda self, e: self.generic_embed_sql(e.args["model"], e.this, e.dim_value),
        # No fixed dimension: the FLOAT[] overload; transpile(models=...) gives FLOAT[dim].
        exp.AIEmbed: lambda self, e: self.func("embed_text", *reversed(e.expressions[:2]), normalize=False),
        SplitTextRecursiveCharacter: lambda self, e: self.func(SQL_FUNCTION_NAME, *_split_args(e), normalize=False),
    }

    def datatype_sql(self, expression: exp.DataType) -> str:
        if expression.is_type(exp.DType.VECTOR) and len(expression.expressions) == 2:
            return _vector_type_sql(self, expression)
        return super().datatype_sql(expression)

    def l1_distance_sql(self, a: exp.Expr, b: exp.Expr) -> str:
        # DuckDB has no L1 distance. Each argument is written once (an embed call must not run
        # twice), NULL gives NULL, and unequal lengths fail as Snowflake's fixed-size VECTORs do.
        pair = f"{{'a': {self.sql(a)}, 'b': {self.sql(b)}}}"
        return (
            f"list_transform([{pair}], lambda l1_pair: CASE WHEN len(l1_pair.a) <> len(l1_pair.b) THEN "
            "error('VECTOR_L1_DISTANCE: vectors of different dimensions') ELSE "
            "list_sum(list_transform(list_zip(l1_pair.a, l1_pair.b), lambda l1_xy: abs(l1_xy[1] - l1_xy[2]))) END)[1]"
        )

    def generic_embed_sql(self, model: exp.Expr, text: exp.Expr, dim: int) -> str:
        call = self.func("embed_text", text, model, exp.Literal.number(dim), normalize=False)
        return f"CAST({call} AS FLOAT[{dim}])"


class EmbedtextDuckDB(DuckDB):
    """DuckDB, writing Snowflake's vector functions and types as DuckDB's array ones.

    >>> import sqlglot
    >>> sqlglot.transpile("SELECT EMBED_TEXT_1024('m', body) FROM d", read=CortexSnowflake, write=EmbedtextDuckDB)
    ["SELECT CAST(embed_text(body, 'm', 1024) AS FLOAT[1024]) FROM d"]
    """

    Generator = EmbedtextDuckDBGenerator
