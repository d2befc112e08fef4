"""embedtext.sql: SQL shipped with embedtext (macros and DDL in ``*.sql``), loaded by ``register``,
and the SQL layer on sqlglot: Snowflake Cortex queries translated to DuckDB, and rewrites that
save model calls.

>>> transpile("SELECT AI_EMBED('e5-base-v2', body) AS v FROM docs", models={"e5-base-v2": ("embed_text", 128)},
...           rewrite=False)
'SELECT embed_text(body) AS v FROM docs'

Imports neither duckdb nor grpc.
"""

from embedtext.sql.ddl import index_tables_ddl
from embedtext.sql.models import (
    DimensionMismatchError,
    EmbedFunction,
    ModelMap,
    SqlTranslationError,
    UnmappedModelError,
)
from embedtext.sql.transpile import transpile, transpile_statements

__all__ = [
    "DimensionMismatchError",
    "EmbedFunction",
    "ModelMap",
    "SqlTranslationError",
    "UnmappedModelError",
    "index_tables_ddl",
    "transpile",
    "transpile_statements",
]
