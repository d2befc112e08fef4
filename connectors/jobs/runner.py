"""One indexing pass: stream the pending rows, embed them, commit batch by batch.

The pending rows are read as Arrow record batches (memory stays flat whatever the table
size); while batch i is being written, batch i+1 is already being embedded. Server
trouble (UNAVAILABLE, overload, deadline) is retried with exponential backoff; a batch the
server rejects as invalid is retried row by row and the rows that keep failing go to the
failed-rows table (and are tried again on the next run). The last line a run prints is its
summary: ``N rows embedded, M removed, K failed in S s``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from embedtext.connectors.client import Client
from embedtext.connectors.jobs.spec import IndexSpec
from embedtext.connectors.jobs.state import IndexLockedError, IndexState, connect
from embedtext.connectors.refusals import each_row_separately, embed_rows_separately
from embedtext.protocol import codec
from embedtext.protocol.errors import (
    DeadlineExceededError,
    EmbedTextError,
    InvalidInputError,
    OverloadedError,
    UnavailableError,
)

_RETRYABLE = (UnavailableError, OverloadedError, DeadlineExceededError)


@dataclass
class IndexSummary:
    embedded: int = 0
    removed: int = 0
    failed: int = 0
    seconds: float = 0.0
    error: str | None = None

    @property
    def line(self) -> str:
        return f"{self.embedded} rows embedded, {self.removed} removed, {self.failed} failed in {self.seconds:.1f} s"


@dataclass
class _Embedded:
    keys: pa.Array
    hashes: pa.Array
    embeddings: pa.FixedSizeListArray | None
    failures: list[tuple[object, str, str]] = field(default_factory=list)  # (key, hash, error)
    chunks: pa.Table | None = None  # a chunked job's: a row per chunk of the keys (IndexState.commit_chunks)


class PassProgress:
    """A bar on a terminal; a plain line every ``every_s`` seconds in a log."""

    def __init__(self, total: int, log: Callable[[str], None]) -> None:
        self.total, self.done, self.log = total, 0, log
        self.started = self.last = time.monotonic()
        self.bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="rows", desc="embedding", file=sys.stderr)

    def update(self, n: int, every_s: float = 10.0) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            return
        now = time.monotonic()
        if now - self.last >= every_s or self.done >= self.total:
            self.last = now
            rate = self.done / max(now - self.started, 1e-9)
            eta = (self.total - self.done) / rate if rate else float("inf")
            self.log(f"embedded {self.done}/{self.total} rows ({rate:,.0f} rows/s, ETA {eta:,.0f} s)")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class BatchEmbedder:
    """One batch of a pass -> its vectors and refused rows, retrying server trouble (local and Ray runners)."""

    def __init__(self, client: Client, spec: IndexSpec, log: Callable[[str], None]) -> None:
        self.client, self.spec, self.log = client, spec, log

    def _retrying(self, call: Callable[[], object]):
        delay = 1.0
        for attempt in range(self.spec.retries + 1):
            try:
                return call()
            except _RETRYABLE as exc:
                if attempt == self.spec.retries:
                    raise
                self.log(
                    f"server trouble ({type(exc).__name__}: {exc}); "
                    f"retry {attempt + 1}/{self.spec.retries} in {delay:.0f} s"
                )
                time.sleep(delay)
                delay = min(delay * 2, 30.0)
        raise AssertionError("unreachable")

    def _call(self, texts: pa.Array) -> pa.FixedSizeListArray:
        spec = self.spec
        return self._retrying(
            lambda: self.client.embed_arrow(
                texts,
                model=spec.model,
                dimensions=spec.dimensions,
                truncate=spec.truncate,
                prompt_name=spec.prompt_name,
            )
        )

    def _chunks(self, keys: pa.Array, hashes: pa.Array, texts: pa.Array) -> pa.Table:
        """The chunk rows of a chunked job's texts (a NULL-chunk row for a text without chunks)."""
        spec = self.spec
        chunks = self._retrying(
            lambda: self.client.embed_chunks(
                texts,
                max_tokens=spec.chunk_tokens,
                overlap=spec.overlap,
                model=spec.model,
                dimensions=spec.dimensions,
                prompt_name=spec.prompt_name,
            )
        )
        bare = np.flatnonzero(chunks.counts == 0)
        rows = pa.array(np.concatenate([chunks.row, bare]).astype(np.int64))
        none = pa.nulls(len(bare), pa.int32())
        vectors = codec.ndarray_to_arrow(
            np.concatenate([chunks.vectors, np.zeros((len(bare), chunks.vectors.shape[1]), np.float32)])
        )
        return pa.table(
            {
                "key": pc.take(keys, rows),
                "content_hash": pc.take(hashes, rows),
                "chunk_index": pa.concat_arrays([pa.array(chunks.index), none]),
                "char_start": pa.concat_arrays([pa.array(chunks.start), none]),
                "char_end": pa.concat_arrays([pa.array(chunks.end), none]),
                "text": pa.concat_arrays([pa.array(chunks.text, pa.string()), pa.nulls(len(bare), pa.string())]),
                "embedding": vectors,
            }
        )

    def __call__(self, batch: pa.RecordBatch) -> _Embedded:
        keys, texts, hashes = batch.column("key"), batch.column("text"), batch.column("content_hash")
        if self.spec.chunked:
            return self._chunked(keys, hashes, texts)
        try:
            return _Embedded(keys, hashes, self._call(texts))
        except InvalidInputError:
            pass
        # The server refused the batch: find the rows it refuses, keep the others' vectors.
        embedded, vectors, refused = embed_rows_separately(self._call, texts)
        idx = pa.array(embedded, pa.int64())
        return _Embedded(pc.take(keys, idx), pc.take(hashes, idx), vectors, _failures(keys, hashes, refused))

    def _chunked(self, keys: pa.Array, hashes: pa.Array, texts: pa.Array) -> _Embedded:
        try:
            return _Embedded(keys, hashes, None, chunks=self._chunks(keys, hashes, texts))
        except InvalidInputError:
            pass
        # The server refused the batch: each text on its own, the refused ones to the failed rows.
        kept, parts, refused = each_row_separately(
            lambda i: self._chunks(keys.slice(i, 1), hashes.slice(i, 1), texts.slice(i, 1)), len(texts)
        )
        idx = pa.array(kept, pa.int64())
        chunks = pa.concat_tables(parts) if parts else None
        return _Embedded(pc.take(keys, idx), pc.take(hashes, idx), None, _failures(keys, hashes, refused), chunks)


def _failures(keys: pa.Array, hashes: pa.Array, refused: dict[int, str]) -> list[tuple[object, str, str]]:
    """The failed rows' (key, content hash, error), for the job's failures table."""
    return [(keys[i].as_py(), hashes[i].as_py(), error) for i, error in refused.items()]


def run_index(
    spec: IndexSpec,
    *,
    client: Client | None = None,
    log: Callable[[str], None] | None = None,
    wait_for_lock_s: float = 0.0,
) -> IndexSummary:
    """Run one incremental pass of ``spec``; returns (and logs last) its summary."""

    def embed_here(con, state: IndexState, client: Client, total: int, summary: IndexSummary, log) -> None:
        _embed_pending(con, state, BatchEmbedder(client, spec, log), PassProgress(total, log), summary)

    return run_pass(spec, embed_here, client=client, log=log, wait_for_lock_s=wait_for_lock_s)


EmbedPending = Callable[..., None]  # (con, state, client, total, summary, log) -> None


def run_pass(
    spec: IndexSpec,
    embed_pending: EmbedPending,
    *,
    client: Client | None = None,
    log: Callable[[str], None] | None = None,
    wait_for_lock_s: float = 0.0,
    where: str = "",
) -> IndexSummary:
    """The steps every engine shares: lock, tables, deletions, pending count, summary.

    ``embed_pending`` embeds and commits the pending rows (locally, or on Ray).
    """
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    started = time.monotonic()
    summary = IndexSummary()
    own_client = client is None
    con = None
    try:
        con = _connect_waiting(spec.database, wait_for_lock_s)
        if client is None:
            client = Client(spec.target, max_batch_rows=512, latency_class="bulk")  # never ahead of queries
        info = client.info().model(spec.model)
        state = IndexState(con, spec, info.name, info.output_dim(spec.dimensions))
        state.prepare()
        summary.removed = state.remove_deleted()
        total = state.count_pending()
        log(
            f"{spec.into_table}: {total} rows to embed with {info.name} ({state.dim}-d){where}, "
            f"{summary.removed} removed"
        )
        if total:
            embed_pending(con, state, client, total, summary, log)
    except EmbedTextError as exc:
        summary.error = str(exc)
    except Exception as exc:
        summary.error = f"{type(exc).__name__}: {exc}"
    finally:
        if con is not None:
            con.close()
        if own_client and client is not None:
            client.close()
        summary.seconds = time.monotonic() - started
    if summary.error:
        log(f"error: {summary.error}")
    log(summary.line)
    return summary


def _connect_waiting(database: str, wait_s: float):
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return connect(database)
        except IndexLockedError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(1.0)


def _embed_pending(con, state: IndexState, embed: BatchEmbedder, progress: PassProgress, summary: IndexSummary) -> None:
    reader_con = con.cursor()  # its own connection: reading while the main one writes
    reader = reader_con.sql(state.pending_sql()).to_arrow_reader(state.spec.batch_rows)
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedtext-index")

    def commit(future: Future) -> None:
        done = future.result()
        if done.chunks is not None and len(done.keys):
            state.commit_chunks(done.chunks)
            summary.embedded += len(done.keys)
        elif done.embeddings is not None and len(done.keys):
            state.commit_batch(done.keys, done.hashes, done.embeddings)
            summary.embedded += len(done.keys)
        if done.failures:
            state.record_failures(*map(list, zip(*done.failures)))
            summary.failed += len(done.failures)
        progress.update(len(done.keys) + len(done.failures))

    try:
        in_flight: Future | None = None
        for batch in reader:
            if batch.num_rows == 0:
                continue
            # Embed the next batch while the previous one is written.
            next_future = pool.submit(embed, batch)
            if in_flight is not None:
                commit(in_flight)
            in_flight = next_future
        if in_flight is not None:
            commit(in_flight)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        progress.close()
        reader_con.close()
