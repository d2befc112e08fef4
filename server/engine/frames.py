"""The frames between the server and a replica's engine process (server/engine/process_backend.py).

A local stream socket (a socketpair the server creates) carries length-prefixed frames, raw
bytes only (no pickle): a fixed header, then a payload.

Header, little-endian: kind (u8), request id (u64), rows (u32), dim (u32), payload bytes (u64).

Server -> worker:
* ``START``: build the engine now (engines start one at a time: each measures free device memory;
  the workers load their code side by side before that);
* ``EMBED``: payload = row lengths (int32 x rows), then every row's token ids (int32); its ``dim``
  field says how many of the first rows are interactive (the engine schedules them first);
* ``ABORT``: drop request ``id`` (its caller went away);
* ``STOP``: shut the engine down and exit.

Worker -> server:
* ``READY``: payload = JSON ``{"pids": [...]}`` (the engine's own processes);
* ``VECTORS``: payload = float32 rows x dim;
* ``REFUSED``: the engine refused the request (bad input); payload = UTF-8 message;
* ``DEAD``: the engine died under the request; payload = UTF-8 message;
* ``FAILED``: the engine did not start; payload = UTF-8 message;
* ``PACE``: a stepped engine's step budget changed; payload = JSON of a ``PaceReport``
  (server/engine/pacing.py), request id 0;
* ``MODEL_TIME``: CPU seconds the engine thread spent in the model's forward since the last such
  frame (float64), request id 0; sent ahead of a ``VECTORS`` frame, so that a batch's vectors
  arrive after the time its steps took (server/engine/model_clock.py).
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from dataclasses import dataclass

import numpy as np

EMBED, ABORT, STOP, START = 1, 2, 3, 4
READY, VECTORS, REFUSED, DEAD, FAILED, PACE, MODEL_TIME = 11, 12, 13, 14, 15, 16, 17

HEADER = struct.Struct("<BQIIQ")
SECONDS = struct.Struct("<d")
# A frame larger than this is a bug on the other side, not a request (the server bounds
# batches far below it): refuse it rather than allocate it.
MAX_PAYLOAD_BYTES = 1 << 31


class FrameError(Exception):
    """The other side sent something that is not a frame of this protocol."""


@dataclass(frozen=True)
class Frame:
    kind: int
    request_id: int
    rows: int
    dim: int
    payload: bytes


def frame(kind: int, request_id: int = 0, payload: bytes = b"", rows: int = 0, dim: int = 0) -> bytes:
    return HEADER.pack(kind, request_id, rows, dim, len(payload)) + payload


async def read_frame(reader: asyncio.StreamReader) -> Frame | None:
    """The next frame, or None at a clean end of stream."""
    try:
        head = await reader.readexactly(HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise FrameError(f"stream ended inside a frame header ({len(exc.partial)} bytes)") from None
        return None
    kind, request_id, rows, dim, size = HEADER.unpack(head)
    if size > MAX_PAYLOAD_BYTES:
        raise FrameError(f"frame of {size} bytes announced; the limit is {MAX_PAYLOAD_BYTES}")
    try:
        payload = await reader.readexactly(size) if size else b""
    except asyncio.IncompleteReadError as exc:
        raise FrameError(f"stream ended inside a frame ({len(exc.partial)} of {size} bytes)") from None
    return Frame(kind, request_id, rows, dim, payload)


def encode_rows(rows: TokenRows | list[list[int]]) -> bytes:
    """Row lengths, then all ids, as int32: what an ``EMBED`` frame carries."""
    rows = TokenRows.from_lists(rows)
    return rows.lengths.astype(np.int32).tobytes() + rows.ids.astype(np.int32, copy=False).tobytes()


def decode_rows(payload: bytes, rows: int) -> list[list[int]]:
    """The inverse of :func:`encode_rows`."""
    return decode_token_rows(payload, rows).to_lists()


class TokenRows:
    """Rows of token ids kept as one flat int32 array and their offsets, without a Python list per
    row: what the tokenizer gives (nanotoken's ragged ids), the queue cuts into batches, an
    ``EMBED`` frame carries, and a packed engine gathers whole runs of rows from.

    >>> rows = TokenRows.from_lists([[1, 2, 3], [4], [5, 6]])
    >>> len(rows), rows[2].tolist(), rows.lengths.tolist()
    (3, [5, 6], [3, 1, 2])
    >>> rows.take(1, 3).tolist(), rows.slice(1, 3).to_lists()
    ([4, 5, 6], [[4], [5, 6]])
    >>> TokenRows.concat([rows.slice(2, 3), rows.slice(0, 1)]).to_lists()
    [[5, 6], [1, 2, 3]]
    """

    __slots__ = ("ids", "lengths", "offsets")

    def __init__(self, ids: np.ndarray, lengths: np.ndarray) -> None:
        self.ids = ids
        self.lengths = lengths.astype(np.int64, copy=False)
        self.offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=self.offsets[1:])

    @classmethod
    def from_lists(cls, rows) -> TokenRows:
        """Rows given as a list of ids per row (or already as TokenRows, returned as they are)."""
        if isinstance(rows, TokenRows):
            return rows
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        ids = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int32, count=int(lengths.sum()))
        return cls(ids, lengths)

    @classmethod
    def concat(cls, parts: list[TokenRows]) -> TokenRows:
        """The rows of ``parts``, one after another."""
        if len(parts) == 1:
            return parts[0]
        return cls(
            np.concatenate([p.ids for p in parts]) if parts else np.zeros(0, dtype=np.int32),
            np.concatenate([p.lengths for p in parts]) if parts else np.zeros(0, dtype=np.int64),
        )

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> np.ndarray:
        if not -len(self) <= index < len(self):
            raise IndexError(f"row {index} of {len(self)}")
        index %= len(self)
        return self.ids[self.offsets[index] : self.offsets[index + 1]]

    def to_lists(self) -> list[list[int]]:
        """A list of ids per row, as vLLM's requests take them."""
        ids = self.ids.tolist()
        offsets = self.offsets.tolist()
        return [ids[offsets[i] : offsets[i + 1]] for i in range(len(self))]

    def take(self, start: int, end: int) -> np.ndarray:
        """The ids of rows ``start`` .. ``end`` - 1, one flat view."""
        return self.ids[self.offsets[start] : self.offsets[end]]

    def slice(self, start: int, end: int) -> TokenRows:
        """Rows ``start`` .. ``end`` - 1, their ids a view of these."""
        return TokenRows(self.take(start, end), self.lengths[start:end])

    def truncated(self, most: int) -> TokenRows:
        """Each row cut to its first ``most`` ids.

        >>> TokenRows.from_lists([[1, 2, 3], [4], [5, 6, 7, 8]]).truncated(2).to_lists()
        [[1, 2], [4], [5, 6]]
        """
        lengths = np.minimum(self.lengths, most)
        return TokenRows(self.ids[row_positions(self.offsets, self.lengths) < most], lengths)


def row_positions(offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Each token's index within its row, for rows laid end to end (``offsets``: where each starts,
    then the total).

    >>> row_positions(np.array([0, 3, 3, 5]), np.array([3, 0, 2])).tolist()
    [0, 1, 2, 0, 1]
    """
    return np.arange(int(offsets[-1]), dtype=np.int64) - np.repeat(offsets[:-1], lengths)


def decode_token_rows(payload: bytes, rows: int) -> TokenRows:
    """As :func:`decode_rows`, kept flat (no list per row)."""
    if len(payload) < 4 * rows:
        raise FrameError(f"an embed frame of {rows} rows holds only {len(payload)} bytes")
    lengths = np.frombuffer(payload, dtype=np.int32, count=rows)
    ids = np.frombuffer(payload, dtype=np.int32, offset=4 * rows)
    if (lengths < 0).any() or int(lengths.sum()) != len(ids):
        raise FrameError(f"an embed frame's row lengths add up to {int(lengths.sum())}, but it holds {len(ids)} ids")
    return TokenRows(ids, lengths)


def decode_model_time(found: Frame) -> float:
    """The seconds a ``MODEL_TIME`` frame carries.

    >>> decode_model_time(Frame(MODEL_TIME, 0, 0, 0, SECONDS.pack(0.25)))
    0.25
    """
    if len(found.payload) != SECONDS.size:
        raise FrameError(f"a model-time frame of {len(found.payload)} bytes, not {SECONDS.size}")
    seconds = SECONDS.unpack(found.payload)[0]
    if not seconds >= 0.0:  # NaN too
        raise FrameError(f"a model-time frame of {seconds} seconds")
    return seconds


def decode_vectors(found: Frame) -> np.ndarray:
    expected = found.rows * found.dim * 4
    if len(found.payload) != expected:
        raise FrameError(
            f"a vectors frame of {found.rows} x {found.dim} holds {len(found.payload)} bytes, not {expected}"
        )
    return np.frombuffer(found.payload, dtype=np.float32).reshape(found.rows, found.dim)
