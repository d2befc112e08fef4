"""The DDL shipped in ``sql/*.sql``, filled in: one source of truth for the jobs and for users.

>>> print(index_tables_ddl('"docs_embeddings"', "BIGINT", 384)[0].splitlines()[0])
CREATE TABLE IF NOT EXISTS "docs_embeddings" (
>>> len(index_tables_ddl('"v"', "VARCHAR", 8))
2
"""

from __future__ import annotations

from importlib import resources


def _statements(filename: str, **values: str) -> list[str]:
    text = resources.files("embedtext.sql").joinpath(filename).read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    filled = "\n".join(lines).format(**values)
    return [s.strip() for s in filled.split(";") if s.strip()]


def array_size(type_name: str) -> int | None:
    """The n of a DuckDB array type name (``FLOAT[384]`` -> 384); None for any other type.

    >>> array_size("FLOAT[384]"), array_size("FLOAT[]"), array_size("VARCHAR")
    (384, None, None)
    """
    head, _, size = type_name.rpartition("[")
    size = size.rstrip("]")
    return int(size) if head and size.isdigit() else None


def index_tables_ddl(
    embeddings: str, key_type: str, dim: int, failed: str | None = None, *, chunked: bool = False
) -> list[str]:
    """CREATE statements for an indexing job's tables (names already quoted as needed): its
    embeddings table (a chunk table where ``chunked``) and its failed-rows table.

    >>> index_tables_ddl('"c"', "BIGINT", 8, chunked=True)[0].splitlines()[2].strip()
    'chunk_index INTEGER,'
    """
    if dim <= 0:
        raise ValueError("dim must be positive")
    failed = failed or (embeddings[:-1] + '_failed"' if embeddings.endswith('"') else embeddings + "_failed")
    values = dict(embeddings=embeddings, failed=failed, key_type=key_type, dim=str(dim))
    rows, failed_rows = _statements("index_tables.sql", **values)
    return [_statements("chunk_tables.sql", **values)[0] if chunked else rows, failed_rows]
