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
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from embedtext.connectors.client import Client
from embedtext.connectors.jobs.runner import BatchEmbedder, IndexSummary, PassProgress, run_pass
from embedtext.connectors.jobs.spec import IndexSpec
from embedtext.connectors.jobs.state import IndexState

_VECTOR = pa.list_(pa.float32())


class EmbedBatchWorker:
    """A Ray Data ``map_batches`` worker: a client of the servers, reused across batches."""

    def __init__(self, spec: IndexSpec) -> None:
        self.spec = spec
        self.client = Client(spec.target, max_batch_rows=512, latency_class="bulk")  # never ahead of queries
        self.embed = BatchEmbedder(self.client, spec, log=lambda line: print(line, file=sys.stderr))

    def __call__(self, batch: pa.Table) -> pa.Table:
        key_type = batch.schema.field("key").type
        done = self.embed(batch.combine_chunks().to_batches()[0]) if batch.num_rows else None
        if self.spec.chunked:
            return _chunk_rows(done, key_type)
        if done is None:
            return pa.table(
                {
                    "key": pa.array([], key_type),
                    "content_hash": pa.array([], pa.string()),
                    "embedding": pa.array([], _VECTOR),
                    "error": pa.array([], pa.string()),
                }
            )
        n_ok, failures = len(done.keys), done.failures
        if done.embeddings is not None and n_ok:
            dim = done.embeddings.type.list_size
            offsets = pa.array([i * dim for i in range(n_ok + 1)], pa.int32())
            ok_vectors = pa.ListArray.from_arrays(offsets, done.embeddings.flatten())
        else:
            ok_vectors = pa.array([], _VECTOR)
        # Variable lists travel through Ray Data as they are; the driver restores FLOAT[dim].
        return pa.table(
            {
                "key": pa.concat_arrays([done.keys, pa.array([f[0] for f in failures], key_type)]),
                "content_hash": pa.concat_arrays([done.hashes, pa.array([f[1] for f in failures], pa.string())]),
                "embedding": pa.concat_arrays([ok_vectors, pa.nulls(len(failures), _VECTOR)]),
                "error": pa.concat_arrays(
                    [pa.nulls(n_ok, pa.string()), pa.array([f[2] for f in failures], pa.string())]
                ),
            }
        )


_CHUNK_COLUMNS = {
    "chunk_index": pa.int32(),
    "char_start": pa.int32(),
    "char_end": pa.int32(),
    "text": pa.string(),
    "embedding": _VECTOR,
}


def _chunk_rows(done, key_type: pa.DataType) -> pa.Table:
    """A chunked job's worker output: its chunk rows (IndexState.commit_chunks), then a row per
    refused text with its error; vectors as variable lists, restored to FLOAT[dim] by the driver."""
    chunks = done.chunks if done is not None else None
    failures = done.failures if done is not None else []
    n = chunks.num_rows if chunks is not None else 0
    columns = {
        "key": [chunks.column("key").combine_chunks() if n else pa.array([], key_type)],
        "content_hash": [chunks.column("content_hash").combine_chunks() if n else pa.array([], pa.string())],
    }
    for name, kind in _CHUNK_COLUMNS.items():
        column = chunks.column(name).combine_chunks() if n else pa.array([], kind)
        columns[name] = [column.cast(kind) if name != "embedding" else _as_lists(column, kind)]
    columns["key"].append(pa.array([f[0] for f in failures], key_type))
    columns["content_hash"].append(pa.array([f[1] for f in failures], pa.string()))
    for name, kind in _CHUNK_COLUMNS.items():
        columns[name].append(pa.nulls(len(failures), kind))
    error = pa.concat_arrays([pa.nulls(n, pa.string()), pa.array([f[2] for f in failures], pa.string())])
    return pa.table({**{k: pa.concat_arrays(v) for k, v in columns.items()}, "error": error})


def _as_lists(vectors: pa.Array, kind: pa.DataType) -> pa.Array:
    if not isinstance(vectors, pa.FixedSizeListArray) or not len(vectors):
        return pa.array([], kind) if not len(vectors) else vectors.cast(kind)
    dim = vectors.type.list_size
    offsets = pa.array([i * dim for i in range(len(vectors) + 1)], pa.int32())
    return pa.ListArray.from_arrays(offsets, vectors.flatten())


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
    Up to ``workers`` Ray actors embed concurrently (default: one per target, at least 2).
    """

    # Ray starts its GCS and raylet processes with fork + a preexec hook; do that before this
    # process opens any gRPC channel of ours (run_pass opens one to ask the server's dims).
    # A failure is reported by the pass, as any other.
    try:
        _init_ray(ray_address)
        ray_error = None
    except Exception as exc:  # noqa: BLE001 - re-raised inside the pass
        ray_error = exc

    def embed_on_ray(con, state: IndexState, client, total: int, summary: IndexSummary, log) -> None:
        if ray_error is not None:
            raise ray_error
        export_dir = tempfile.mkdtemp(prefix="embedtext-ray-")
        try:
            _export_pending(con, state, export_dir)
            dataset = _embedding_dataset(spec, export_dir, workers)
            progress = PassProgress(total, log)
            try:
                for batch in dataset.iter_batches(batch_format="pyarrow", batch_size=None):
                    if spec.chunked:
                        _commit_ray_chunks(state, batch, state.dim, summary)
                        progress.update(len(pc.unique(batch.column("key"))))
                    else:
                        _commit_ray_batch(state, batch, state.dim, summary)
                        progress.update(batch.num_rows)
            finally:
                progress.close()
        finally:
            shutil.rmtree(export_dir, ignore_errors=True)

    return run_pass(spec, embed_on_ray, log=log, wait_for_lock_s=wait_for_lock_s, where=" on Ray")


def _export_pending(con, state: IndexState, export_dir: str) -> None:
    """One Parquet file per batch, streamed out of DuckDB: Ray reads a block per file, so every
    worker gets work, and the driver's memory stays flat."""
    reader_con = con.cursor()
    try:
        reader = reader_con.sql(state.pending_sql()).to_arrow_reader(state.spec.batch_rows)
        for i, batch in enumerate(reader):
            if batch.num_rows:
                pq.write_table(pa.Table.from_batches([batch]), os.path.join(export_dir, f"part-{i:06d}.parquet"))
    finally:
        reader_con.close()


def _init_ray(ray_address: str | None) -> None:
    if ray_address is None:
        # A cluster of this machine, started here: its workers run this interpreter. Under `uv run`
        # Ray would otherwise have each worker build a virtual environment of its own from the
        # working directory (its uv integration), minutes on a small machine for nothing.
        os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    import ray

    if not ray.is_initialized():
        # Ray's GCS can take longer than its default 30 s to come up on a small, busy machine.
        os.environ.setdefault("RAY_gcs_server_port_wait_time_s", "180")
        ray.init(address=ray_address, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)


def _embedding_dataset(spec: IndexSpec, export_dir: str, workers: int | None):
    import ray  # started by run_index_on_ray, before the pass's gRPC client

    targets = [spec.target] if isinstance(spec.target, str) else list(spec.target or ())
    files = len(os.listdir(export_dir))
    most = min(workers or max(2, len(targets)), files)
    return ray.data.read_parquet(export_dir, override_num_blocks=files).map_batches(
        EmbedBatchWorker,
        fn_constructor_kwargs={"spec": spec},
        batch_size=spec.batch_rows,
        batch_format="pyarrow",
        concurrency=(1, most),  # autoscale up to `most` actors
        num_cpus=0.5,
    )


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
        state.record_failures(
            bad.column("key").to_pylist(), bad.column("content_hash").to_pylist(), bad.column("error").to_pylist()
        )
        summary.failed += bad.num_rows


def _commit_ray_chunks(state: IndexState, batch: pa.Table, dim: int, summary: IndexSummary) -> None:
    failed = pc.is_valid(batch.column("error"))
    ok = batch.filter(pc.invert(failed)).drop_columns(["error"])
    bad = batch.filter(failed)
    if ok.num_rows:
        flat = pc.list_flatten(ok.column("embedding").combine_chunks()).cast(pa.float32())
        vectors = pa.FixedSizeListArray.from_arrays(flat, dim)
        ok = ok.set_column(ok.schema.get_field_index("embedding"), "embedding", vectors)
        state.commit_chunks(ok)
        summary.embedded += len(pc.unique(ok.column("key")))
    if bad.num_rows:
        state.record_failures(
            bad.column("key").to_pylist(), bad.column("content_hash").to_pylist(), bad.column("error").to_pylist()
        )
        summary.failed += bad.num_rows
