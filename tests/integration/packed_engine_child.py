"""The child of test_packed_engine.py: SOURCES CASES (JSON). For each (model, dtype) case, a packed
backend on that model starts (checking itself against the engine), embeds real texts in several
packed steps, and compares them with vLLM's own request path in the same engine; one ``RESULT``
line of JSON per case."""

import json
import os
import sys

# Real texts per model: the generated ones get fewer of the same kinds (most of the test's time is
# the models' forwards on a CPU).
BODIES = {"default": 48, "cls": 16, "qwen3": 16, "gemma3": 16}


def _texts(model: str) -> list[str]:
    from embedtext.corpus import docstring_corpus

    bodies = list(docstring_corpus()["body"][: BODIES[model]])
    return bodies + ["", "a", "Ünïcode façade naïve", "word " * 600]  # the last one truncated to the model's most


def _head_is_timed(backend) -> bool | None:
    """Whether the model's Dense layers count as the model's CPU (None: it has none)."""
    import torch

    projector = backend.packed.projector
    if projector is None:
        return None
    backend.take_model_seconds()
    width = next(projector.parameters()).shape[1]  # the first layer's input width
    with torch.inference_mode():
        projector(torch.ones(8, width, dtype=backend.packed.head_dtype))
    return backend.take_model_seconds() > 0.0


def _case(model: str, source: str, dtype: str) -> dict:
    import asyncio

    import numpy as np

    from embedtext.server.engine.base import EngineSettings
    from embedtext.server.engine.packed_backend import PackedVllmBackend
    from embedtext.server.engine.vllm_packed import agreement
    from embedtext.server.models.source import load_model_spec
    from embedtext.server.tokenization.pool import TokenizerPool

    spec = load_model_spec(source)
    rows = TokenizerPool(str(spec.tokenizer_file), spec.max_tokens).tokenize_sync(_texts(model)).to_lists()
    # Steps of 512 tokens (a row's most): each batch below spans several.
    settings = EngineSettings(
        memory_fraction=0.05, max_batch_tokens=512, max_num_seqs=256, device="cpu", dtype=dtype, enforce_eager=True
    )
    backend = PackedVllmBackend(spec, settings, name=f"{model}-{dtype}")

    async def run() -> dict:
        await backend.start()
        try:
            if backend.packed is None:
                return {"packed": False, "why": "the backend fell back to vLLM's requests (see its log)"}
            # The start-up check ran vLLM's own forwards (its runner's, timed as the stepped path's).
            runner_seconds = backend.take_model_seconds()
            # Two batches at once, the second with interactive rows: several steps each.
            half = len(rows) // 2
            first, second = await asyncio.gather(backend.embed(rows[:half]), backend.embed(rows[half:], 4))
            vectors = np.concatenate([first, second])
            alone = await backend.embed(rows)
            packed_seconds = backend.take_model_seconds()  # the packed path's own calls of the model
            # A GPU's loop on this CPU: each step launched before the last one's vectors are collected.
            backend.overlaps_steps = True
            first, second = await asyncio.gather(backend.embed(rows[:half]), backend.embed(rows[half:], 4))
            overlapped = np.concatenate([first, second])
            backend.overlaps_steps = False
            head_timed = _head_is_timed(backend)
            checked = backend.packed.check(backend._engine, rows)  # the engine's own request path
            # Every attention backend but vLLM-CPU's (a GPU's) has its metadata from the backend's
            # own builder: that path too, here on the CPU builder, against the same request path.
            backend.packed._cpu_metadata = None
            builder = backend.packed.check(backend._engine, rows)
            return {
                "packed": True,
                "pooling": backend.packed.pooling,
                "rows": len(rows),
                "vectors": int(vectors.shape[0]),
                "dim": int(vectors.shape[1]),
                "least_cosine": checked.least_cosine,
                "norm_error": checked.norm_error,
                "min_cosine": checked.bound.min_cosine,
                "max_norm_error": checked.bound.max_norm_error,
                "builder_least_cosine": builder.least_cosine,
                "builder_norm_error": builder.norm_error,
                "builder_min_cosine": builder.bound.min_cosine,
                "builder_max_norm_error": builder.bound.max_norm_error,
                # Each row against itself computed in other steps, held to the check's bound: bfloat16
                # is not batch-invariant, and a row given another's vector falls far below it.
                "batches_in_order": checked.bound.admits(*agreement(vectors, alone)),
                "overlapped_steps_in_order": checked.bound.admits(*agreement(vectors, overlapped)),
                "model_seconds": [runner_seconds, packed_seconds],
                "head_timed": head_timed,
            }
        finally:
            await backend.stop()

    return asyncio.run(run())


if __name__ == "__main__":
    from embedtext.server.engine.vllm_stepped import use_inprocess_engine
    from embedtext.server.host.cpu_threads import cpu_engine_env

    os.environ.update(cpu_engine_env())  # as the server sets it up for its engines
    use_inprocess_engine()
    sources = json.loads(sys.argv[1])
    for model, dtype in json.loads(sys.argv[2]):
        print("RESULT " + json.dumps({"case": [model, dtype], **_case(model, sources[model], dtype)}), flush=True)
