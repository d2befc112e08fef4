"""The hot path of ``embed_text``: one DuckDB chunk (Arrow) -> one ``FixedSizeListArray``.

Per chunk: NULL rows are set aside, identical strings are embedded once (Arrow's
``unique``/``index_in``, no Python object per row), the distinct texts go out as packed
requests kept in flight concurrently by the client, and the reply bytes become the
result array without copying when no row repeats and none is NULL.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from embedtext.connectors.client import Client
from embedtext.connectors.refusals import embed_rows_separately
from embedtext.connectors.splitting import TextChunks
from embedtext.protocol import codec
from embedtext.protocol.errors import InvalidInputError


@dataclass(frozen=True)
class ChunkOptions:
    model: str | None
    dimensions: int | None
    dim: int  # the dimension of the result type
    truncate: bool = True
    on_error: str = "fail"  # "fail": a bad row fails the query; "null": it gives NULL
    prompt_name: str | None = None  # one of the model's prompts (None: its default, if any)
    long_texts: str = (
        "truncate"  # a text over the model's max tokens: "truncate" (or an error), or "mean" of its chunks
    )

    def __post_init__(self) -> None:
        if self.long_texts not in LONG_TEXTS:
            raise ValueError(f"long_texts is one of {', '.join(LONG_TEXTS)}; got {self.long_texts!r}")
        if self.long_texts == "mean" and not self.truncate:
            raise ValueError("long_texts='mean' embeds a long text in chunks: it does not go with truncate=False")


#: What embed_text does with a text over the model's max tokens: cut it there ("truncate"; an
#: error with truncate=False), or embed its chunks and give their mean ("mean").
LONG_TEXTS = ("truncate", "mean")


class ChunkEmbedder:
    """Callable registered with DuckDB; thread-safe (DuckDB may call it from several threads)."""

    def __init__(self, client: Client, options: ChunkOptions, on_rows: Callable[[int], None] | None = None) -> None:
        if options.on_error not in ("fail", "null"):
            raise ValueError("on_error is 'fail' or 'null'")
        self.client = client
        self.options = options
        self.on_rows = on_rows
        self._lock = threading.Lock()
        self.calls = 0  # chunks seen
        self.rows_sent = 0  # distinct texts sent to the server

    # DuckDB passes one ChunkedArray per argument.
    def __call__(self, texts: pa.ChunkedArray | pa.Array) -> pa.FixedSizeListArray:
        arr = codec.as_string_array(texts)
        n = len(arr)
        # NULL, empty and whitespace-only texts have nothing to embed: they give NULL. utf8_is_space
        # stops at a text's first other character; trimming would copy every text (4x the time).
        blank = pc.or_(pc.utf8_is_space(arr), pc.equal(pc.binary_length(arr), 0))
        skip = pc.fill_null(blank, True)
        if pc.any(skip).as_py():
            arr = pc.if_else(skip, pa.scalar(None, pa.string()), arr)
        valid = arr if arr.null_count == 0 else arr.drop_null()
        if len(valid) == 0:
            return self._all_null(n)
        distinct = pc.unique(valid)
        vectors = self._embed(distinct)
        if len(distinct) == n and arr.null_count == 0:
            result = vectors  # zero copy: every row is its own reply row
        else:
            result = pc.take(vectors, pc.index_in(arr, value_set=distinct))
            if isinstance(result, pa.ChunkedArray):
                result = result.combine_chunks()
        with self._lock:
            self.calls += 1
            self.rows_sent += len(distinct)
        if self.on_rows is not None and n > len(distinct):
            self.on_rows(n - len(distinct))  # rows answered without a call (NULL, blank, repeats)
        return result

    def _all_null(self, n: int) -> pa.FixedSizeListArray:
        values = pa.array(np.zeros(n * self.options.dim, np.float32))
        mask = pa.array(np.ones(n, dtype=bool))
        return pa.FixedSizeListArray.from_arrays(values, self.options.dim, mask=mask)

    def _embed(self, texts: pa.StringArray) -> pa.FixedSizeListArray:
        if self.options.long_texts == "mean":
            vectors = self._mean_of_chunks(texts)
            if self.on_rows is not None:
                self.on_rows(len(texts))
            return vectors
        return self.embed_texts(texts, self.on_rows)

    def embed_chunks(self, texts: pa.StringArray, max_tokens: int | None = None, overlap: int = 0) -> TextChunks:
        """The chunks of ``texts`` (none NULL) by the model's tokens, each embedded as this function
        embeds a text (its model, dimensions and prompt)."""
        o = self.options
        return self.client.embed_chunks(
            texts,
            max_tokens=max_tokens,
            overlap=overlap,
            model=o.model,
            dimensions=o.dimensions,
            prompt_name=o.prompt_name,
        )

    def _mean_of_chunks(self, texts: pa.StringArray) -> pa.FixedSizeListArray:
        """One vector per text: the mean of its chunks' vectors, L2-normalized where the model
        normalizes (as vLLM pools a long text's chunks); NULL for a text without tokens."""
        chunks = self.embed_chunks(texts)
        normalize = self.client.info().model(self.options.model).normalize_default
        means = chunks.mean_vectors(normalize=normalize)
        mask = pa.array(chunks.counts == 0)
        return pa.FixedSizeListArray.from_arrays(pa.array(means.reshape(-1)), self.options.dim, mask=mask)

    def embed_texts(self, texts: pa.StringArray, on_rows: Callable[[int], None] | None = None) -> pa.FixedSizeListArray:
        """Each of ``texts`` (distinct, none NULL) embedded as it is, cut at the model's max tokens."""
        o = self.options

        def embed(rows: pa.Array, on_rows=None) -> pa.FixedSizeListArray:
            return self.client.embed_arrow(
                rows,
                model=o.model,
                dimensions=o.dimensions,
                truncate=o.truncate,
                prompt_name=o.prompt_name,
                on_rows=on_rows,
            )

        try:
            return embed(texts, on_rows)
        except InvalidInputError:
            if o.on_error != "null":
                raise
        # Slow path after a refused batch: the refused rows give NULL, the others their vectors.
        embedded, vectors, _ = embed_rows_separately(embed, texts)
        if vectors is None:
            return self._all_null(len(texts))
        slots: list[int | None] = [None] * len(texts)
        for rank, row in enumerate(embedded):
            slots[row] = rank
        return pc.take(vectors, pa.array(slots, pa.int32()))


class OptionsChunkEmbedder:
    """Backs ``embed_text(text, model, dimensions, prompt)``: options arrive as (constant) columns.

    DuckDB fixes a function's result type when it is registered, so this form returns a
    ``FLOAT[]`` list of the requested size; cast it (``::FLOAT[256]``) to get an array.
    """

    def __init__(self, client: Client, truncate: bool, on_error: str, long_texts: str = "truncate") -> None:
        self.client = client
        self.truncate = truncate
        self.on_error = on_error
        self.long_texts = long_texts
        # (model, dimensions, prompt name) -> its embedder: a prompt is part of what a text is embedded as.
        self._embedders: dict[tuple[str | None, int | None, str | None], ChunkEmbedder] = {}
        self._lock = threading.Lock()

    def _embedder(self, model: str | None, dimensions: int | None, prompt_name: str | None) -> ChunkEmbedder:
        key = (model or None, dimensions or None, prompt_name or None)
        with self._lock:
            if key not in self._embedders:
                dim = self.client.info().model(key[0]).output_dim(key[1])
                self._embedders[key] = ChunkEmbedder(
                    self.client,
                    ChunkOptions(key[0], key[1], dim, self.truncate, self.on_error, key[2], self.long_texts),
                )
            return self._embedders[key]

    def __call__(self, texts, models=None, dimensions=None, prompts=None) -> pa.ListArray:
        model = constant_of(models, "model")
        dims = constant_of(dimensions, "dimensions")
        embedder = self._embedder(model, int(dims) if dims is not None else None, constant_of(prompts, "prompt"))
        fixed = embedder(texts)
        values = fixed.flatten() if fixed.null_count == 0 else fixed.values
        dim = embedder.options.dim
        offsets = pa.array(np.arange(len(fixed) + 1, dtype=np.int32) * dim)
        return pa.ListArray.from_arrays(offsets, values, mask=fixed.is_null() if fixed.null_count else None)


def constant_of(column, what: str):
    """The one value a constant argument column holds (None: NULL); an error if rows differ."""
    if column is None:
        return None
    distinct = pc.unique(column if isinstance(column, pa.Array) else column.combine_chunks())
    values = [v for v in distinct.to_pylist() if v is not None]
    if len(values) > 1:
        raise InvalidInputError(f"embed_text: {what} must be the same for every row of a query (got {values[:3]})")
    return values[0] if values else None
