"""Turning user input into EmbedRequests and replies back into arrays.

Shared by the sync and asyncio clients: splitting large inputs into sub-batches
(by rows and by bytes), building requests, and decoding replies without copies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from embedtext.protocol import REQUEST_TEXT_BYTES, codec
from embedtext.protocol import embedding_pb2 as pb
from embedtext.protocol.errors import ProtocolError


@dataclass(frozen=True)
class RequestOptions:
    model: str | None = None
    dimensions: int | None = None
    normalize: bool | None = None
    truncate: bool = True
    # OUTPUT_DTYPE_FLOAT32 (raw bytes), _FLOAT16 (half the bytes) or _FLOAT32_REPEATED (slow).
    output_dtype: int = pb.OUTPUT_DTYPE_FLOAT32
    caller: str = ""  # the client's id: its bulk requests share one fair share on the server
    prompt_name: str | None = None  # one of the model's prompts (None: its default, if any)
    prompt: str | None = None  # a prompt's own text, in place of any named one ("": none)

    def apply(self, request: pb.EmbedRequest) -> pb.EmbedRequest:
        set_model_and_prompt(request, self.model, self.prompt_name, self.prompt)
        if self.dimensions:
            if self.dimensions < 0:
                raise ValueError("dimensions must be positive")
            request.dimensions = self.dimensions
        if self.normalize is not None:
            request.normalize = self.normalize
        request.truncation = pb.TRUNCATION_END if self.truncate else pb.TRUNCATION_NONE
        request.output_dtype = self.output_dtype
        request.caller = self.caller
        return request


def set_model_and_prompt(
    request: pb.EmbedRequest | pb.SplitRequest, model: str | None, prompt_name: str | None, prompt: str | None
) -> None:
    """The fields Embed and Split requests share: the model, and the prompt by name or by text."""
    if model:
        request.model = model
    if prompt_name:
        request.prompt_name = prompt_name
    if prompt is not None:
        request.prompt = prompt


@dataclass(frozen=True)
class SubBatch:
    start: int
    stop: int
    request: pb.EmbedRequest


def text_slices(arr: pa.StringArray, max_rows: int, max_bytes: int) -> list[tuple[int, int]]:
    """``arr``'s rows in (start, stop) slices of at most ``max_rows`` rows and ``max_bytes`` of UTF-8
    (one row alone may be more); a NULL row raises with its row number."""
    n = len(arr)
    if arr.null_count:
        codec.pack_texts(arr)  # raises with the row number of the first NULL
    if not n:
        return []
    offsets = np.frombuffer(arr.buffers()[1], dtype=codec.I32LE, count=arr.offset + n + 1)[arr.offset :]
    slices, start = [], 0
    while start < n:
        stop = min(n, start + max_rows)
        # Shrink the slice until its UTF-8 payload fits the per-request byte budget.
        while stop - start > 1 and offsets[stop] - offsets[start] > max_bytes:
            stop = start + (stop - start) // 2
        slices.append((start, stop))
        start = stop
    return slices


def plan_text_requests(texts, options: RequestOptions, max_rows: int) -> tuple[int, list[SubBatch]]:
    """Split texts (any sequence of str or an Arrow string array) into packed requests."""
    arr = codec.as_string_array(texts)
    batches: list[SubBatch] = []
    for start, stop in text_slices(arr, max_rows, REQUEST_TEXT_BYTES):
        data, offs = codec.pack_texts(arr.slice(start, stop - start))
        request = options.apply(pb.EmbedRequest(packed_texts=pb.PackedTexts(data_utf8=data, offsets_i32le=offs)))
        request.request_id = len(batches)
        batches.append(SubBatch(start, stop, request))
    return len(arr), batches


def plan_token_requests(
    rows: Sequence[Sequence[int]], options: RequestOptions, max_rows: int
) -> tuple[int, list[SubBatch]]:
    n = len(rows)
    batches = []
    for start in range(0, n, max_rows):
        stop = min(n, start + max_rows)
        ids, offs = codec.pack_token_ids(rows[start:stop])
        request = options.apply(pb.EmbedRequest(token_ids=pb.PackedTokenIds(ids_i32le=ids, offsets_i32le=offs)))
        request.request_id = len(batches)
        batches.append(SubBatch(start, stop, request))
    return n, batches


def reply_to_ndarray(response: pb.EmbedResponse, expected_rows: int) -> np.ndarray:
    """Reply -> (count, dim) float32 array over the reply's bytes (no copy for float32)."""
    if response.count != expected_rows:
        raise ProtocolError(f"asked for {expected_rows} rows, the server answered {response.count}")
    if response.dtype == pb.OUTPUT_DTYPE_FLOAT16:
        return codec.bytes_to_ndarray(response.embeddings_f16le, response.count, response.dim, codec.F16LE).astype(
            np.float32
        )
    if response.dtype == pb.OUTPUT_DTYPE_FLOAT32_REPEATED:
        return codec.repeated_to_ndarray(response.embeddings_f32, response.count, response.dim)
    return codec.bytes_to_ndarray(response.embeddings_f32le, response.count, response.dim)


def reply_to_arrow(response: pb.EmbedResponse, expected_rows: int) -> pa.FixedSizeListArray:
    """Reply -> ``pa.FixedSizeListArray`` over the reply's bytes (no copy for float32)."""
    if response.dtype in (pb.OUTPUT_DTYPE_FLOAT16, pb.OUTPUT_DTYPE_FLOAT32_REPEATED):
        return codec.ndarray_to_arrow(reply_to_ndarray(response, expected_rows))
    if response.count != expected_rows:
        raise ProtocolError(f"asked for {expected_rows} rows, the server answered {response.count}")
    return codec.bytes_to_arrow(response.embeddings_f32le, response.count, response.dim)


def stack_ndarrays(parts: list[np.ndarray], n: int, dim_if_empty: int) -> np.ndarray:
    if not parts:
        return np.empty((n, dim_if_empty), dtype=np.float32)
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts, axis=0)


def stack_arrow(parts: list[pa.FixedSizeListArray], dim_if_empty: int) -> pa.FixedSizeListArray:
    if not parts:
        return pa.FixedSizeListArray.from_arrays(pa.array([], type=pa.float32()), dim_if_empty)
    if len(parts) == 1:
        return parts[0]
    return pa.concat_arrays(parts)
