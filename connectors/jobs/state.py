"""The job's state lives in the database itself: the embeddings table and the failed-rows table.

The embeddings table holds one row per key: ``key, content_hash, model, dimensions,
embedding FLOAT[d], indexed_at``. A key needs embedding when it is new, its text's hash
changed, or it was embedded with another model or dimension. With a prompt (``--prompt``) the hash
is of the prompt's name and the text together, so a job whose prompt changes embeds its rows again.
With ``--chunk-tokens`` the table holds a row per chunk of each text (``key, chunk_index, ...,
char_start, char_end, text, embedding``), and the hash covers the chunk size and overlap too: a
changed text gets its own chunks anew, and no other key's. Each batch is written in one
transaction (delete the key's old rows, insert the new ones), so a run killed at any moment leaves
only whole batches behind and the next run picks up exactly what is missing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import duckdb
import pyarrow as pa

from embedtext.connectors.jobs.spec import IndexSpec, quote_ident
from embedtext.sql.ddl import array_size, index_tables_ddl


class IndexLockedError(RuntimeError):
    """Another process holds the database (DuckDB allows one writing process per file)."""


def connect(database: str) -> duckdb.DuckDBPyConnection:
    try:
        return duckdb.connect(database)
    except duckdb.IOException as exc:
        if "lock" in str(exc).lower():
            raise IndexLockedError(
                f"{database} is in use by another process (another `embedtext index` run, or a program "
                f"holding the file open): wait for it to finish, or pass --wait. DuckDB said: {exc}"
            ) from None
        raise


class IndexState:
    """Reads and writes the embeddings and failed-rows tables of one job."""

    def __init__(self, con: duckdb.DuckDBPyConnection, spec: IndexSpec, model: str, dim: int) -> None:
        self.con = con
        self.spec = spec
        self.model = model
        self.dim = dim
        self.into = quote_ident(spec.into_table)
        self.failed = quote_ident(spec.failed_table)
        self.src = spec.source_sql
        self.key = quote_ident(spec.key)
        self.text = quote_ident(spec.text)
        # What a row is embedded as: its text, after the prompt's name where the job names one.
        prompt = (
            ""
            if spec.prompt_name is None
            else "'prompt ' || '" + spec.prompt_name.replace("'", "''") + "' || chr(10) || "
        )
        # A chunked job's rows are its chunks: their size and overlap are part of what a text is embedded as.
        chunking = f"'chunks {spec.chunk_tokens} {spec.overlap}' || chr(10) || " if spec.chunked else ""
        self.hashed = f"md5({chunking}{prompt}s.{self.text}::VARCHAR)"
        # The stored state of each key: its one row, or one of its chunks' (they share hash, model, dims).
        self.per_key = (
            f"(SELECT key, any_value(content_hash) AS content_hash, any_value(model) AS model, "
            f"any_value(dimensions) AS dimensions FROM {self.into} GROUP BY key)"
            if spec.chunked
            else self.into
        )

    def _sql(self, sql: str, params: list | None = None) -> list:
        # duckdb 2.0 refuses new work while a result is unfinished: always fetch to the end.
        return self.con.execute(sql, params or []).fetchall()

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self._sql("BEGIN TRANSACTION")
        try:
            yield
        except BaseException:
            self._sql("ROLLBACK")
            raise
        self._sql("COMMIT")

    def key_type(self) -> str:
        rows = self._sql(f"DESCRIBE SELECT {self.key}, {self.text} FROM {self.src}")
        return rows[0][1]

    def _existing_dim(self) -> int | None:
        rows = self._sql(
            "SELECT data_type FROM information_schema.columns WHERE table_name = ? AND column_name = 'embedding'",
            [self.spec.into_table],
        )
        if not rows:
            return None
        size = array_size(rows[0][0])  # FLOAT[384] -> 384
        return size if size is not None else -1  # not an array: recreate

    def prepare(self) -> None:
        """Create the tables; recreate the embeddings table if its dimension changed."""
        key_type = self.key_type()
        existing = self._existing_dim()
        with self._transaction():
            if existing is not None and existing != self.dim:
                self._sql(f"DROP TABLE {self.into}")
            for statement in index_tables_ddl(
                self.into, key_type, self.dim, failed=self.failed, chunked=self.spec.chunked
            ):
                self._sql(statement)

    def _has_text(self, alias: str) -> str:
        # NULL, empty and whitespace-only texts have nothing to embed (as with embed_text).
        return f"{alias}.{self.text} IS NOT NULL AND trim({alias}.{self.text}::VARCHAR) <> ''"

    def pending_sql(self) -> str:
        """Source rows whose embedding is missing or stale (new, changed text, other model or dim)."""
        model = self.model.replace("'", "''")
        return (
            f"SELECT s.{self.key} AS key, s.{self.text}::VARCHAR AS text, {self.hashed} AS content_hash "
            f"FROM {self.src} s LEFT JOIN {self.per_key} e ON e.key = s.{self.key} "
            f"WHERE {self._has_text('s')} AND s.{self.key} IS NOT NULL AND (e.key IS NULL "
            f"OR e.content_hash <> {self.hashed} OR e.model <> '{model}' OR e.dimensions <> {self.dim})"
        )

    def count_pending(self) -> int:
        return self._sql(f"SELECT count(*) FROM ({self.pending_sql()})")[0][0]

    def remove_deleted(self) -> int:
        """Drop embeddings whose key left the source (or whose text became NULL); returns the keys dropped."""
        gone = f"NOT EXISTS (SELECT 1 FROM {self.src} s WHERE s.{self.key} = e.key AND {self._has_text('s')})"
        with self._transaction():
            if self.spec.chunked:  # keys removed, not their chunk rows
                removed = self._sql(f"SELECT count(DISTINCT key) FROM {self.into} e WHERE {gone}")[0][0]
                self._sql(f"DELETE FROM {self.into} e WHERE {gone}")
            else:
                removed = self._sql(f"DELETE FROM {self.into} e WHERE {gone}")[0][0]
            self._sql(
                f"DELETE FROM {self.failed} f WHERE NOT EXISTS "
                f"(SELECT 1 FROM {self.src} s WHERE s.{self.key} = f.key AND {self._has_text('s')})"
            )
        return removed

    def commit_batch(self, keys: pa.Array, hashes: pa.Array, embeddings: pa.FixedSizeListArray) -> None:
        """Replace the embeddings of ``keys`` in one transaction."""
        batch = pa.table({"key": keys, "content_hash": hashes, "embedding": embeddings})
        self._replace_keys(batch, "key, content_hash, ?, ?, embedding, now()::TIMESTAMP FROM __embedtext_batch")

    def commit_chunks(self, chunks: pa.Table) -> None:
        """Replace the chunks of the keys in ``chunks`` in one transaction: a row per chunk (``key,
        content_hash, chunk_index, char_start, char_end, text, embedding``), and a row with a NULL
        chunk_index for a key whose text has no chunks (its old chunks go all the same)."""
        self._replace_keys(
            chunks,
            "key, chunk_index, content_hash, ?, ?, char_start, char_end, text, embedding, now()::TIMESTAMP "
            "FROM __embedtext_batch WHERE chunk_index IS NOT NULL",
        )

    def _replace_keys(self, batch: pa.Table, select: str) -> None:
        """In one transaction: the rows of ``batch``'s keys dropped, ``SELECT select`` (reading the
        batch as ``__embedtext_batch``, the model and dim as parameters) inserted, their failures cleared."""
        self.con.register("__embedtext_batch", batch)
        try:
            with self._transaction():
                self._sql(f"DELETE FROM {self.into} WHERE key IN (SELECT key FROM __embedtext_batch)")
                self._sql(f"INSERT INTO {self.into} SELECT {select}", [self.model, self.dim])
                self._sql(f"DELETE FROM {self.failed} WHERE key IN (SELECT key FROM __embedtext_batch)")
        finally:
            self.con.unregister("__embedtext_batch")

    def record_failures(self, keys: list, hashes: list, errors: list[str]) -> None:
        rows = pa.table({"key": keys, "content_hash": hashes, "error": errors})
        self.con.register("__embedtext_failed", rows)
        try:
            with self._transaction():
                self._sql(
                    f"INSERT INTO {self.failed} SELECT b.key, b.content_hash, ?, b.error, "
                    f"coalesce((SELECT max(attempts) FROM {self.failed} f WHERE f.key = b.key), 0) + 1, "
                    "now()::TIMESTAMP FROM __embedtext_failed b",
                    [self.model],
                )
                self._sql(
                    f"DELETE FROM {self.failed} f WHERE f.key IN (SELECT key FROM __embedtext_failed) "
                    f"AND f.attempts < (SELECT max(attempts) FROM {self.failed} g WHERE g.key = f.key)"
                )
        finally:
            self.con.unregister("__embedtext_failed")
