"""Long texts in DuckDB: ``embed_text_chunks``, a row per chunk of each text.

It asks the server to cut each text by the model's own tokens and embeds the chunks' texts
(``Client.embed_chunks``) with the registered function's model, dimensions and prompt, so a chunk's
vector is its text's ``embed_text`` vector.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa

from embedtext.protocol import codec
from embedtext.udf.chunk import ChunkEmbedder, constant_of

#: The fields of each chunk ``embed_text_chunks`` gives; ``char_start`` and ``char_end`` count characters
#: from 0 (end exclusive): ``substring(body, char_start + 1, char_end - char_start)`` is the chunk's text.
CHUNK_FIELDS = ("chunk_index", "char_start", "char_end", "tokens", "text", "embedding")


def chunk_list_type(dim: int) -> duckdb.sqltype:
    """``STRUCT(chunk_index, char_start, char_end, tokens, text, embedding FLOAT[dim])[]``."""
    integer, varchar = duckdb.sqltype("INTEGER"), duckdb.sqltype("VARCHAR")
    embedding = duckdb.array_type(duckdb.sqltype("FLOAT"), dim)
    fields = dict(zip(CHUNK_FIELDS, (integer, integer, integer, integer, varchar, embedding)))
    return duckdb.list_type(duckdb.struct_type(fields))


class ChunksEmbedder:
    """Backs ``embed_text_chunks(text, max_tokens, overlap)``: a list of chunks per row (NULL for NULL)."""

    def __init__(self, embedder: ChunkEmbedder) -> None:
        self.embedder = embedder

    def __call__(self, texts, max_tokens=None, overlaps=None) -> pa.ListArray:
        arr = codec.as_string_array(texts)
        size = constant_of(max_tokens, "max_tokens")
        overlap = constant_of(overlaps, "overlap")
        valid = arr.drop_null() if arr.null_count else arr
        chunks = self.embedder.embed_chunks(valid, int(size) if size else None, int(overlap or 0))
        vectors = codec.ndarray_to_arrow(chunks.vectors)
        items = pa.StructArray.from_arrays(
            [
                pa.array(chunks.index),
                pa.array(chunks.start),
                pa.array(chunks.end),
                pa.array(chunks.tokens),
                pa.array(chunks.text, pa.string()),
                vectors,
            ],
            names=list(CHUNK_FIELDS),
        )
        counts = np.zeros(len(arr), dtype=np.int32)
        is_valid = (
            np.ones(len(arr), dtype=bool) if not arr.null_count else arr.is_valid().to_numpy(zero_copy_only=False)
        )
        counts[is_valid] = chunks.counts
        offsets = np.zeros(len(arr) + 1, dtype=np.int32)
        np.cumsum(counts, out=offsets[1:])
        mask = pa.array(~is_valid) if arr.null_count else None
        return pa.ListArray.from_arrays(pa.array(offsets), items, mask=mask)


__all__ = ["CHUNK_FIELDS", "ChunksEmbedder", "chunk_list_type"]
