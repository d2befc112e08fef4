"""The DuckDB functions we compare ``embed_text`` with: a UDF posting JSON to an OpenAI-format
endpoint, as users build today."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import duckdb
import numpy as np
import pyarrow as pa
from duckdb.func import FunctionNullHandling, PythonUDFType


def as_fixed_size_list(vectors: np.ndarray) -> pa.FixedSizeListArray:
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), vectors.shape[1])


class ArrowEmbedder:
    """A DuckDB Arrow UDF (``register_udf``) over its ``embed(texts) -> vectors``."""

    def embed(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    def __call__(self, chunk: pa.ChunkedArray | pa.Array) -> pa.FixedSizeListArray:
        return as_fixed_size_list(self.embed(chunk.to_pylist()))


class OpenAIJsonEmbedder(ArrowEmbedder):
    """Chunk -> JSON requests of ``batch_rows`` texts, ``in_flight`` at once -> FLOAT[dim]."""

    def __init__(
        self, url: str, model: str, *, batch_rows: int = 512, in_flight: int = 8, timeout: float = 600
    ) -> None:
        import httpx

        self.url = url.rstrip("/") + "/v1/embeddings"
        self.model = model
        self.batch_rows = batch_rows
        self._http = httpx.Client(
            timeout=timeout, limits=httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
        )
        self._pool = ThreadPoolExecutor(max_workers=in_flight, thread_name_prefix="bench-http")

    def _post(self, texts: list[str]) -> list[list[float]]:
        reply = self._http.post(
            self.url,
            content=json.dumps({"model": self.model, "input": texts}),
            headers={"content-type": "application/json"},
        )
        reply.raise_for_status()
        data = json.loads(reply.content)["data"]
        return [d["embedding"] for d in sorted(data, key=lambda d: d["index"])]

    def embed(self, texts: list[str]) -> np.ndarray:
        parts = [texts[i : i + self.batch_rows] for i in range(0, len(texts), self.batch_rows)]
        rows = [row for part in self._pool.map(self._post, parts) for row in part]
        return np.asarray(rows, dtype=np.float32)

    def close(self) -> None:
        self._pool.shutdown()
        self._http.close()


def register_udf(con: duckdb.DuckDBPyConnection, name: str, fn, dim: int) -> None:
    """Register ``name(text) -> FLOAT[dim]`` as an Arrow UDF, like ``embedtext.register`` does."""
    con.create_function(
        name,
        fn,
        [duckdb.sqltype("VARCHAR")],
        duckdb.array_type(duckdb.sqltype("FLOAT"), dim),
        type=PythonUDFType.ARROW,
        null_handling=FunctionNullHandling.DEFAULT,
        side_effects=False,
    )
