"""Scale-out of the indexing job on Ray Data.

The driver does what it does locally (prepare the tables, remove deleted keys, find the
pending rows, commit each batch in one transaction); only the embedding moves to Ray:
the pending rows are exported to Parquet, read by ``ray.data.read_parquet``, embedded by
``map_batches`` workers that are each a client of one or more servers, and streamed back
to the driver batch by batch. The resulting table is the same as a local run's, and a
crash loses nothing for the same reason (whole batches are committed).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from embedtext.connectors.client import Client
from embedtext.connectors.jobs.runner import IndexSummary, _BatchEmbedder, _connect_waiting, _Progress
from embedtext.connectors.jobs.spec import IndexSpec
from embedtext.connectors.jobs.state import IndexState
from embedtext.protocol.errors import EmbedTextError, InvalidInputError


_VECTOR = pa.list_(pa.float32())


class EmbedBatchWorker:
    """A Ray Data ``map_batches`` worker: a client of the servers, reused across batches."""

    def __init__(self, spec: IndexSpec) -> None:
        self.spec = spec
        self.client = Client(spec.target, max_batch_rows=512)
        self.embed = _BatchEmbedder(self.client, spec, log=lambda line: print(line, file=sys.stderr))

    def __call__(self, batch: pa.Table) -> pa.Table:
        key_type = batch.schema.field("key").type
        done = self.embed(batch.combine_chunks().to_batches()[0]) if batch.num_rows else None
        if done is None:
            return pa.table({"key": pa.array([], key_type), "content_hash": pa.array([], pa.string()),
                             "embedding": pa.array([], _VECTOR), "error": pa.array([], pa.string())})
        n_ok, failures = len(done.keys), done.failures
        if done.embeddings is not None and n_ok:
            dim = done.embeddings.type.list_size
            offsets = pa.array([i * dim for i in range(n_ok + 1)], pa.int32())
            ok_vectors = pa.ListArray.from_arrays(offsets, done.embeddings.flatten())
        else:
            ok_vectors = pa.array([], _VECTOR)
        # Variable lists travel through Ray Data as they are; the driver restores FLOAT[dim].
        return pa.table({
            "key": pa.concat_arrays([done.keys, pa.array([f[0] for f in failures], key_type)]),
            "content_hash": pa.concat_arrays([done.hashes, pa.array([f[1] for f in failures], pa.string())]),
            "embedding": pa.concat_arrays([ok_vectors, pa.nulls(len(failures), _VECTOR)]),
            "error": pa.concat_arrays([pa.nulls(n_ok, pa.string()), pa.array([f[2] for f in failures], pa.string())]),
        })


def run_index_on_ray(
    spec: IndexSpec,
    *,
    workers: int | None = None,
    ray_address: str | None = None,
    log: Callable[[str], None] | None = None,
    wait_for_lock_s: float = 0.0,
) -> IndexSummary:
    """Run one incremental pass of ``spec`` with the embedding done by Ray Data workers.

    ``spec.target`` should list the servers; each worker spreads its calls over all of them.
    ``workers`` Ray actors embed concurrently (default: one per target, at least 2).
    """
    import ray

    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    started = time.monotonic()
    summary = IndexSummary()
    con = None
    export_dir = tempfile.mkdtemp(prefix="embedtext-ray-")
    try:
        con = _connect_waiting(spec.database, wait_for_lock_s)
        with Client(spec.target) as client:
            info = client.info().model(spec.model)
        if spec.dimensions is not None and not 0 < spec.dimensions <= info.dim:
            raise InvalidInputError(f"dimensions={spec.dimensions} is not available: {info.name} has {info.dim}")
        state = IndexState(con, spec, info.name, spec.dimensions or info.dim)
        state.prepare()
        summary.removed = state.remove_deleted()
        total = state.count_pending()
        log(f"{spec.into_table}: {total} rows to embed with {info.name} ({state.dim}-d) on Ray, {summary.removed} removed")
        if total:
            # One Parquet file per batch, streamed out of DuckDB: Ray reads a block per file, so
            # every worker gets work, and the driver's memory stays flat.
            reader_con = con.cursor()
            try:
                reader = reader_con.sql(state.pending_sql()).to_arrow_reader(spec.batch_rows)
                for i, batch in enumerate(reader):
                    if batch.num_rows:
                        pq.write_table(pa.Table.from_batches([batch]), os.path.join(export_dir, f"part-{i:06d}.parquet"))
            finally:
                reader_con.close()
            if not ray.is_initialized():
                ray.init(address=ray_address, include_dashboard=False, log_to_driver=False,
                         ignore_reinit_error=True)
            targets = [spec.target] if isinstance(spec.target, str) else list(spec.target or ())
            n = workers or max(2, len(targets))
            files = len(os.listdir(export_dir))
            dataset = ray.data.read_parquet(export_dir, override_num_blocks=files).map_batches(
                EmbedBatchWorker,
                fn_constructor_kwargs={"spec": spec},
                batch_size=spec.batch_rows,
                batch_format="pyarrow",
                concurrency=(1, min(n, files)),  # autoscale up to n actors
                num_cpus=0.5,
            )
            progress = _Progress(total, log)
            try:
                for batch in dataset.iter_batches(batch_format="pyarrow", batch_size=None):
                    _commit_ray_batch(state, batch, state.dim, summary)
                    progress.update(batch.num_rows)
            finally:
                progress.close()
    except EmbedTextError as exc:
        summary.error = str(exc)
    except Exception as exc:
        summary.error = f"{type(exc).__name__}: {exc}"
    finally:
        if con is not None:
            con.close()
        shutil.rmtree(export_dir, ignore_errors=True)
        summary.seconds = time.monotonic() - started
    if summary.error:
        log(f"error: {summary.error}")
    log(summary.line)
    return summary


def _commit_ray_batch(state: IndexState, batch: pa.Table, dim: int, summary: IndexSummary) -> None:
    failed = pc.is_valid(batch.column("error"))
    ok = batch.filter(pc.invert(failed))
    bad = batch.filter(failed)
    if ok.num_rows:
        flat = pc.list_flatten(ok.column("embedding").combine_chunks())
        vectors = pa.FixedSizeListArray.from_arrays(flat.cast(pa.float32()), dim)
        state.commit_batch(ok.column("key").combine_chunks(), ok.column("content_hash").combine_chunks(), vectors)
        summary.embedded += ok.num_rows
    if bad.num_rows:
        state.record_failures(bad.column("key").to_pylist(), bad.column("content_hash").to_pylist(),
                              bad.column("error").to_pylist())
        summary.failed += bad.num_rows
