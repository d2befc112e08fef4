"""The frames between the server and a replica's engine process: round trips and broken streams."""

import asyncio
import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from embedtext.server.engine import frames


def _read_all(data: bytes) -> list:
    async def go():
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        out = []
        while (found := await frames.read_frame(reader)) is not None:
            out.append(found)
        return out

    return asyncio.run(go())


@given(st.lists(st.lists(st.integers(0, 2**31 - 1), max_size=40), min_size=1, max_size=30))
def test_rows_round_trip(rows):
    payload = frames.encode_rows(rows)
    assert frames.decode_rows(payload, len(rows)) == rows


def test_frames_follow_each_other_on_one_stream():
    vectors = np.arange(12, dtype=np.float32).reshape(3, 4)
    data = (
        frames.frame(frames.EMBED, 7, frames.encode_rows([[1, 2], [3]]), rows=2)
        + frames.frame(frames.ABORT, 7)
        + frames.frame(frames.VECTORS, 8, vectors.tobytes(), rows=3, dim=4)
    )
    embed, abort, reply = _read_all(data)
    assert (embed.kind, embed.request_id, frames.decode_rows(embed.payload, embed.rows)) == (
        frames.EMBED,
        7,
        [[1, 2], [3]],
    )
    assert (abort.kind, abort.request_id, abort.payload) == (frames.ABORT, 7, b"")
    np.testing.assert_array_equal(frames.decode_vectors(reply), vectors)


def test_a_stream_cut_inside_a_frame_is_an_error_not_an_end():
    whole = frames.frame(frames.VECTORS, 1, b"\0" * 16, rows=1, dim=4)
    with pytest.raises(frames.FrameError, match="inside a frame"):
        _read_all(whole[:-3])
    with pytest.raises(frames.FrameError, match="header"):
        _read_all(whole[:5])


def test_an_absurd_length_is_refused_before_anything_is_allocated():
    head = frames.HEADER.pack(frames.VECTORS, 1, 1, 1, frames.MAX_PAYLOAD_BYTES + 1)
    with pytest.raises(frames.FrameError, match="limit"):
        _read_all(head)


def test_inconsistent_payloads_are_refused():
    with pytest.raises(frames.FrameError, match="add up"):
        frames.decode_rows(frames.encode_rows([[1, 2, 3]])[:-4], 1)
    with pytest.raises(frames.FrameError, match="holds only"):
        frames.decode_rows(b"\0\0", 1)
    bad = frames.Frame(frames.VECTORS, 1, rows=2, dim=4, payload=b"\0" * 16)
    with pytest.raises(frames.FrameError, match="not 32"):
        frames.decode_vectors(bad)


def _replica_reading(*sent: bytes):
    """A replica's backend after reading these frames from its worker (then the end of the stream)."""
    from pathlib import Path

    from embedtext.server.engine.base import EngineSettings
    from embedtext.server.engine.process_backend import EngineProcessBackend
    from embedtext.server.models.source import ModelSpec

    async def go():
        spec = ModelSpec(name="m", path=Path("m"), dim=4, max_tokens=16, pooling="mean", normalize=True)
        backend = EngineProcessBackend(spec, EngineSettings(0.1, 64, 8, "cpu"), engine="vllm-stepped")
        reader = asyncio.StreamReader()
        reader.feed_data(b"".join(sent))
        reader.feed_eof()
        await backend._read_replies(reader)
        return backend

    return asyncio.run(go())


def test_a_stepped_workers_pace_report_reaches_its_replica():
    from embedtext.server.pacing import PaceReport

    first, last = PaceReport(1024, 0.0, True), PaceReport(873, 9980.5, True)
    backend = _replica_reading(
        *(frames.frame(frames.PACE, payload=json.dumps(dataclasses.asdict(p)).encode()) for p in (first, last))
    )
    assert backend._pace == last and backend._dead == "its engine process exited"


def test_a_garbled_pace_report_breaks_the_protocol():
    backend = _replica_reading(frames.frame(frames.PACE, payload=b'{"budget": 1}'))
    assert "broke the protocol" in backend._dead and backend._pace is None
