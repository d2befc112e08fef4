"""What an indexing job indexes: source relation, key, text column, target table, model."""

from __future__ import annotations

import re
from dataclasses import dataclass

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")


def quote_ident(name: str) -> str:
    """Quote a (possibly schema-qualified) identifier for DuckDB."""
    return ".".join('"' + part.replace('"', '""') + '"' for part in name.split("."))


@dataclass(frozen=True)
class IndexSpec:
    """One indexing job.

    ``source`` is a table or view name in the database, a Parquet/CSV/JSON path or glob
    (``data/*.parquet``), or a query (``SELECT id, body FROM docs WHERE lang = 'en'``).

    >>> IndexSpec("docs.duckdb", "docs", key="id", text="body").into_table
    'docs_embeddings'
    >>> IndexSpec("x.duckdb", "data/*.parquet", key="id", text="body").source_sql
    "read_parquet('data/*.parquet')"
    >>> IndexSpec("docs.duckdb", "docs", key="id", text="body", chunk_tokens=256, overlap=32).into_table
    'docs_chunks'

    """

    database: str
    source: str
    key: str
    text: str
    into: str | None = None
    target: str | tuple[str, ...] | None = None
    model: str | None = None
    dimensions: int | None = None
    batch_rows: int = 2048
    retries: int = 5
    truncate: bool = True  # False: rows over the model's max tokens fail (to the failed-rows table)
    prompt_name: str | None = None  # one of the model's prompts before each text (None: its default, if any)
    chunk_tokens: int | None = None  # keep a chunk table: each text cut into chunks of at most this many tokens
    overlap: int = 0  # tokens each chunk shares with the one before (with chunk_tokens)

    def __post_init__(self) -> None:
        for what in ("key", "text"):
            if not _IDENT.match(getattr(self, what).split(".")[-1]):
                raise ValueError(f"--{what} {getattr(self, what)!r} is not a plain column name")
        if self.into is not None and not _IDENT.match(self.into):
            raise ValueError(f"--into {self.into!r} is not a plain table name")
        if self.batch_rows < 1:
            raise ValueError("batch_rows must be positive")
        if self.chunk_tokens is None and self.overlap:
            raise ValueError("--overlap is the overlap of chunks: it needs --chunk-tokens")
        if self.chunk_tokens is not None and not 0 <= self.overlap < self.chunk_tokens:
            raise ValueError(
                f"--overlap {self.overlap} must be 0 or more and less than --chunk-tokens {self.chunk_tokens}"
            )

    @property
    def source_kind(self) -> str:
        s = self.source.strip()
        if re.match(r"(?is)^\s*(select|with|from|values)\b", s):
            return "query"
        if re.search(r"\.(parquet|csv|tsv|json|jsonl|ndjson)(\.gz|\.zst)?$", s, re.I) or any(c in s for c in "*?/"):
            return "files"
        if _IDENT.match(s):
            return "table"
        raise ValueError(f"source {self.source!r} is neither a table name, a file path or glob, nor a query")

    @property
    def source_sql(self) -> str:
        """The source as a relation usable in FROM."""
        kind = self.source_kind
        if kind == "table":
            return quote_ident(self.source)
        if kind == "query":
            return f"({self.source})"
        path = self.source.replace("'", "''")
        lower = self.source.lower()
        if ".csv" in lower or ".tsv" in lower:
            return f"read_csv('{path}')"
        if ".json" in lower:
            return f"read_json_auto('{path}')"
        return f"read_parquet('{path}')"

    @property
    def chunked(self) -> bool:
        """The job keeps a chunk table (a row per chunk of each text), not a row per text."""
        return self.chunk_tokens is not None

    @property
    def into_table(self) -> str:
        if self.into:
            return self.into
        kind = "chunks" if self.chunked else "embeddings"
        if self.source_kind == "table":
            return f"{self.source.split('.')[-1]}_{kind}"
        return kind

    @property
    def failed_table(self) -> str:
        return f"{self.into_table}_failed"
