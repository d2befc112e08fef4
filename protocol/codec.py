"""The only code that knows embedtext's byte layouts.

* Texts travel Arrow-style: one UTF-8 buffer plus ``count + 1`` int32 LE offsets.
* Token ids travel the same way: int32 LE ids plus int32 LE offsets.
* Embeddings travel as one buffer of ``count x dim`` little-endian float32 (or float16),
  row-major, and are turned into numpy or Arrow arrays without copying.

Every decoder checks counts, dims and offsets and raises
:class:`~embedtext.protocol.errors.InvalidInputError` (request side) or
:class:`~embedtext.protocol.errors.ProtocolError` (reply side) with a message that says
what is wrong.

>>> data, offsets = pack_texts(["a", "bc"])
>>> unpack_texts(data, offsets)
['a', 'bc']
>>> arr = bytes_to_arrow(embeddings_to_bytes(np.eye(2, dtype=np.float32)), 2, 2)
>>> arr.to_pylist()
[[1.0, 0.0], [0.0, 1.0]]
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from embedtext.protocol.errors import InvalidInputError, ProtocolError

F32LE = np.dtype("<f4")
F16LE = np.dtype("<f2")
I32LE = np.dtype("<i4")

_MAX_INT32 = 2**31 - 1


# --- texts -------------------------------------------------------------------------------


def as_string_array(texts: Sequence[str] | pa.Array | pa.ChunkedArray) -> pa.StringArray:
    """Any sequence of strings or Arrow string array -> one ``pa.StringArray`` (NULLs kept)."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks() if texts.num_chunks != 1 else texts.chunk(0)
    if not isinstance(texts, pa.Array):
        if isinstance(texts, str):
            raise TypeError("expected a sequence of strings, got a single str; wrap it in a list")
        try:
            texts = pa.array(texts, type=pa.string())
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise TypeError(f"expected a sequence of strings: {exc}") from None
    if pa.types.is_string(texts.type):
        return texts
    if pa.types.is_large_string(texts.type) or pa.types.is_string_view(texts.type):
        return texts.cast(pa.string())
    raise TypeError(f"expected an Arrow string array, got {texts.type}")


def pack_texts(texts: Sequence[str] | pa.Array | pa.ChunkedArray) -> tuple[bytes, bytes]:
    """Strings -> (UTF-8 data, int32 LE offsets); rejects NULLs with the row number."""
    arr = as_string_array(texts)
    if arr.null_count:
        first = arr.is_null().to_numpy(zero_copy_only=False).argmax()
        raise InvalidInputError(f"row {first} is NULL; embedtext embeds strings only (filter NULLs first)")
    n = len(arr)
    _, offsets_buf, data_buf = arr.buffers()
    if n == 0:
        return b"", np.zeros(1, I32LE).tobytes()
    offsets = np.frombuffer(offsets_buf, dtype=I32LE, count=arr.offset + n + 1)[arr.offset :]
    start, end = int(offsets[0]), int(offsets[-1])
    # The slice's own bytes only: a slice of a larger array shares its parent's whole data buffer.
    data = data_buf[start:end].to_pybytes() if data_buf is not None else b""
    if start:
        offsets = offsets - start
    return data, offsets.astype(I32LE, copy=False).tobytes()


def _offsets(offsets_bytes: bytes, what: str, total: int) -> np.ndarray:
    if len(offsets_bytes) % 4:
        raise InvalidInputError(f"{what}: offsets are {len(offsets_bytes)} bytes, not a multiple of 4 (int32 LE)")
    offsets = np.frombuffer(offsets_bytes, dtype=I32LE)
    if len(offsets) == 0:
        raise InvalidInputError(f"{what}: offsets are empty; expected count + 1 int32 values starting at 0")
    if offsets[0] != 0:
        raise InvalidInputError(f"{what}: the first offset is {offsets[0]}, expected 0")
    if offsets[-1] != total:
        raise InvalidInputError(f"{what}: the last offset is {offsets[-1]} but the data holds {total}")
    if len(offsets) > 1:
        steps = np.diff(offsets)
        if (steps < 0).any():
            row = int(np.argmax(steps < 0))
            raise InvalidInputError(f"{what}: offsets decrease at row {row}")
    return offsets


def unpack_texts(data: bytes, offsets_bytes: bytes) -> list[str]:
    """(UTF-8 data, int32 LE offsets) -> strings; checks offsets and UTF-8."""
    offsets = _offsets(offsets_bytes, "packed_texts", len(data))
    n = len(offsets) - 1
    arr = pa.StringArray.from_buffers(n, pa.py_buffer(offsets_bytes), pa.py_buffer(data))
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid:
        for i in range(n):
            try:
                data[offsets[i] : offsets[i + 1]].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidInputError(f"packed_texts: row {i} is not valid UTF-8 ({exc.reason})") from None
        raise InvalidInputError("packed_texts: invalid string data") from None
    return arr.to_pylist()


# --- token ids ---------------------------------------------------------------------------


def pack_token_ids(rows: Sequence[Sequence[int]]) -> tuple[bytes, bytes]:
    """Rows of token ids -> (int32 LE ids, int32 LE offsets)."""
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > _MAX_INT32:
        raise InvalidInputError("too many token ids for one request")
    flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=int(offsets[-1]))
    if len(flat) and (flat.min() < 0 or flat.max() > _MAX_INT32):
        raise InvalidInputError("token ids must be in 0..2**31-1")
    return flat.astype(I32LE).tobytes(), offsets.astype(I32LE).tobytes()


def unpack_token_ids(ids_bytes: bytes, offsets_bytes: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(int32 LE ids, int32 LE offsets) -> (the ids, flat, over ``ids_bytes``; each row's length as
    int64); checks offsets and signs. No Python int per token: a request's ids stay one array.

    >>> ids, lengths = unpack_token_ids(*pack_token_ids([[2, 5, 3], [], [7]]))
    >>> ids.tolist(), lengths.tolist()
    ([2, 5, 3, 7], [3, 0, 1])
    """
    if len(ids_bytes) % 4:
        raise InvalidInputError(f"token_ids: ids are {len(ids_bytes)} bytes, not a multiple of 4 (int32 LE)")
    ids = np.frombuffer(ids_bytes, dtype=I32LE)
    offsets = _offsets(offsets_bytes, "token_ids", len(ids))
    if len(ids) and ids.min() < 0:
        row = int(np.searchsorted(offsets, int(np.argmax(ids < 0)), side="right") - 1)
        raise InvalidInputError(f"token_ids: row {row} holds a negative token id")
    return ids, np.diff(offsets).astype(np.int64)


# --- embeddings --------------------------------------------------------------------------


def embeddings_as(embeddings: np.ndarray, dtype: np.dtype = F32LE) -> np.ndarray:
    """(count, dim) array -> row-major little-endian array of ``dtype`` (copied only if it is not)."""
    if embeddings.ndim != 2:
        raise ValueError(f"expected a (count, dim) array, got shape {embeddings.shape}")
    return np.ascontiguousarray(embeddings, dtype=dtype)


def embeddings_to_bytes(embeddings: np.ndarray, dtype: np.dtype = F32LE) -> bytes:
    """(count, dim) array -> count x dim little-endian values, row-major."""
    return embeddings_as(embeddings, dtype).tobytes()


def _check_size(buf: bytes, count: int, dim: int, itemsize: int) -> None:
    expected = count * dim * itemsize
    if len(buf) != expected:
        raise ProtocolError(
            f"embeddings are {len(buf)} bytes; count {count} x dim {dim} x {itemsize} bytes needs {expected}"
        )


def bytes_to_ndarray(buf: bytes, count: int, dim: int, dtype: np.dtype = F32LE) -> np.ndarray:
    """Reply bytes -> a read-only (count, dim) array over the same memory (no copy)."""
    dtype = np.dtype(dtype)
    _check_size(buf, count, dim, dtype.itemsize)
    return np.frombuffer(buf, dtype=dtype).reshape(count, dim)


def repeated_to_ndarray(values: Sequence[float], count: int, dim: int) -> np.ndarray:
    """A protobuf ``repeated float`` reply -> (count, dim) float32 array (one copy, value by value)."""
    if len(values) != count * dim:
        raise ProtocolError(f"embeddings hold {len(values)} values; count {count} x dim {dim} needs {count * dim}")
    return np.asarray(values, dtype=F32LE).reshape(count, dim)


def bytes_to_arrow(buf: bytes, count: int, dim: int) -> pa.FixedSizeListArray:
    """Reply float32 bytes -> ``pa.FixedSizeListArray`` (float32, list size dim) over the same memory."""
    _check_size(buf, count, dim, 4)
    values = pa.Array.from_buffers(pa.float32(), count * dim, [None, pa.py_buffer(buf)])
    return pa.FixedSizeListArray.from_arrays(values, dim)


def ndarray_to_arrow(embeddings: np.ndarray) -> pa.FixedSizeListArray:
    """(count, dim) float32 array -> ``pa.FixedSizeListArray`` without copying when contiguous."""
    flat = np.ascontiguousarray(embeddings, dtype=F32LE).reshape(-1)
    return pa.FixedSizeListArray.from_arrays(pa.array(flat, type=pa.float32()), embeddings.shape[1])


def int32s_to_bytes(values: Sequence[int] | np.ndarray) -> bytes:
    return np.asarray(values, dtype=I32LE).tobytes()


def bytes_to_int32s(buf: bytes, count: int) -> np.ndarray:
    if len(buf) != 4 * count:
        raise ProtocolError(f"expected {count} int32 values, got {len(buf)} bytes")
    return np.frombuffer(buf, dtype=I32LE)
