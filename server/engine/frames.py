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
  (server/pacing.py), request id 0;
* ``MODEL_TIME``: CPU seconds the engine thread spent in the model's forward since the last such
  frame (float64), request id 0; sent ahead of a ``VECTORS`` frame, so that a batch's vectors
  arrive after the time its steps took (server/engine/model_clock.py).
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass

import numpy as np

from embedtext.server.rows import TokenRows

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
