"""The vLLM side of check_imports.py: the API our engines call, vLLM's engine config for a model, one
engine's start, and the CPU rehearsal's stand-in GPU platform. ``check`` is check_imports.py's
(one printed line a check)."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from pathlib import Path

Check = Callable[..., object]


def api(platform: bool, check: Check) -> None:
    """The vLLM API embedtext.server.engine.base and the bench use (deploy/gpu/README.md, 'vLLM versions')."""

    def engine_args():
        from vllm import EngineArgs

        fields = set(inspect.signature(EngineArgs).parameters)
        wanted = {
            "model",
            "runner",
            "convert",
            "gpu_memory_utilization",
            "max_model_len",
            "max_num_batched_tokens",
            "max_num_seqs",
            "dtype",
            "enforce_eager",
            "disable_log_stats",
            "enable_prefix_caching",
        }
        missing = wanted - fields
        assert not missing, f"EngineArgs lacks {sorted(missing)}"
        return "runner/convert/... present"

    def pooling_params():
        from vllm import PoolingParams

        p = PoolingParams(task="embed", use_activation=False)
        PoolingParams(task="embed", use_activation=False, dimensions=32)
        return f"{p!r}"[:80]

    def tokens_input():
        from vllm.inputs import tokens_input

        return f"{tokens_input([101, 102])!r}"[:80]

    def llm_engine():
        """The stepped loop's engine (server/engine/vllm_stepped.py): in this process, stepped by us."""
        import vllm.envs as envs
        from vllm.v1.engine.llm_engine import LLMEngine

        missing = [m for m in ("from_engine_args", "add_request", "step", "abort_request") if not hasattr(LLMEngine, m)]
        assert not missing, f"LLMEngine lacks {missing}"
        add = inspect.signature(LLMEngine.add_request)
        assert list(add.parameters)[1:4] == ["request_id", "prompt", "params"], f"add_request{add}"
        internal = inspect.signature(LLMEngine.abort_request).parameters.get("internal")
        # The loop aborts by its own ids, and reads them back from each output's request_id.
        assert internal is None or internal.default is False, "abort_request takes vLLM's internal ids by default"
        assert hasattr(envs, "VLLM_ENABLE_V1_MULTIPROCESSING"), "no VLLM_ENABLE_V1_MULTIPROCESSING (in-process core)"
        return f"add_request{add}"[:120]

    def llm_class():
        from vllm import LLM

        assert hasattr(LLM, "embed")
        return "LLM.embed present"

    def http_cli():
        from vllm.entrypoints.openai.cli_args import make_arg_parser
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        parser = make_arg_parser(FlexibleArgumentParser())
        from embedtext.bench.servers import vllm_http_command

        # The bench's own command line for vLLM's HTTP server, less ``python -m MODULE``.
        argv = vllm_http_command("/tmp/m", "m", port=8000, max_tokens=512, dtype="auto")[3:]
        ns = parser.parse_args(argv)
        assert ns.runner == "pooling" and ns.convert == "embed" and ns.enable_prefix_caching is False
        return "bench/servers.py's api_server arguments parse"

    for name, fn in [
        ("EngineArgs fields", engine_args),
        ("PoolingParams(task='embed', use_activation=False)", pooling_params),
        ("vllm.inputs.tokens_input", tokens_input),
        ("LLMEngine API (stepped loop)", llm_engine),
        ("vllm.LLM", llm_class),
    ]:
        check(f"api: {name}", fn)
    # vLLM's argument parser asks the platform for defaults: no GPU, no platform.
    check("api: api_server command line", http_cli, optional=not platform)


def engine_config(model: str, platform: bool, check: Check) -> None:
    def build():
        from vllm import EngineArgs

        from embedtext.server.engine.base import EngineSettings
        from embedtext.server.engine.vllm_args import engine_arguments
        from embedtext.server.models.source import load_model_spec

        settings = EngineSettings(memory_fraction=0.2, max_batch_tokens=16384, max_num_seqs=1024, device="cuda")
        config = EngineArgs(**engine_arguments(load_model_spec(model), settings)).create_engine_config()
        mc = config.model_config
        return f"runner={mc.runner} convert={getattr(mc, 'convert', '?')} dtype={mc.dtype} arch={mc.architectures}"

    check("engine config (server/engine/vllm_args.py's EngineArgs)", build, optional=not platform)


def _on_engine(model: str, settings, work):
    """Start one packed engine (the server's, in this process) for ``model``, await ``work(backend,
    tokenizer)`` on it, stop it.
    Returns (what ``work`` returned, the start's seconds, the model's spec)."""
    import asyncio

    from tokenizers import Tokenizer

    from embedtext.server.engine.packed_backend import PackedVllmBackend
    from embedtext.server.models.source import load_model_spec

    spec = load_model_spec(model)
    tok = Tokenizer.from_file(str(Path(spec.path) / "tokenizer.json"))
    # As the server's tokenizer stage does: a tokenizer.json may pad every row to a fixed length
    # (all-MiniLM-L6-v2's pads to 128), and the engine would pool the [PAD]s too.
    tok.no_padding()
    backend = PackedVllmBackend(spec, settings)

    async def go():
        t = time.perf_counter()
        await backend.start()
        started = time.perf_counter() - t
        try:
            return await work(backend, tok), started
        finally:
            await backend.stop()

    return (*asyncio.run(go()), spec)


def engine_smoke(model: str, check: Check) -> None:
    """One packed engine, 3 rows, against sentence-transformers (float32, CPU)."""

    def run():
        import numpy as np

        from embedtext.server.engine.base import EngineSettings

        async def embed(backend, tok):
            return await backend.embed([tok.encode(t).ids for t in SMOKE_TEXTS])

        settings = EngineSettings(memory_fraction=0.1, max_batch_tokens=16384, max_num_seqs=64, device="cuda")
        vecs, started, spec = _on_engine(model, settings, embed)
        assert vecs.shape[0] == 3 and np.isfinite(vecs).all(), vecs.shape
        cos = _cosines_to_reference(spec.path, SMOKE_TEXTS, vecs)
        detail = f"shape {vecs.shape}, engine start {started:.0f}s, cosine vs sentence-transformers {cos}"
        assert min(cos) > 0.99, detail
        return detail

    check("engine: packed engine start + embed 3 rows", run)


SMOKE_TEXTS = ["hello world", "a somewhat longer sentence about tables and embeddings", "x " * 40]


def _cosines_to_reference(model_dir, texts, vecs) -> list[float]:
    """Per row, the cosine of ``vecs`` to sentence-transformers in float32 on the CPU (the plainest
    reference; run after vLLM's engine, so that CUDA is not initialized ahead of its fork)."""
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    ref = SentenceTransformer(str(model_dir), device="cpu", model_kwargs={"torch_dtype": torch.float32})
    ref = ref.encode(list(texts), normalize_embeddings=True)
    ours = np.asarray(vecs, dtype=np.float64)
    ours = ours / np.linalg.norm(ours, axis=1, keepdims=True)
    return [round(float(c), 4) for c in (ours * ref).sum(axis=1)]


def attention_backends(model: str, backends: list[str], check: Check) -> None:
    """vLLM's own ``LLM.embed`` per attention backend, each in a process of its own, against the
    same reference: tells a wrong kernel from a wrong path of ours."""
    import json
    import subprocess
    import sys

    code = (
        "import json, sys; from vllm import LLM; from embedtext.server.models.source import load_model_spec\n"
        "b = sys.argv[1]; kw = {} if b == 'auto' else {'attention_backend': b}\n"
        "llm = LLM(model=str(load_model_spec(sys.argv[2]).path), runner='pooling', convert='embed',\n"
        "          enforce_eager=True, gpu_memory_utilization=0.1, **kw)\n"
        "out = [o.outputs.embedding for o in llm.embed(json.loads(sys.argv[3]))]\n"
        "print('VECTORS ' + json.dumps(out), flush=True)\n"
    )
    for backend in backends:

        def run(backend=backend):
            from embedtext.server.models.source import load_model_spec

            done = subprocess.run(
                [sys.executable, "-c", code, backend, model, json.dumps(SMOKE_TEXTS)],
                capture_output=True,
                text=True,
                timeout=240,
            )
            lines = [x for x in done.stdout.splitlines() if x.startswith("VECTORS ")]
            assert lines, (done.stderr.strip().splitlines() or ["no output"])[-1]
            cos = _cosines_to_reference(load_model_spec(model).path, SMOKE_TEXTS, json.loads(lines[-1][8:]))
            assert min(cos) > 0.99, f"cosine vs sentence-transformers {cos}"
            return f"cosine vs sentence-transformers {cos}"

        check(f"engine: vLLM LLM.embed with attention backend {backend}", run)


def priority_order(model: str, check: Check, device: str = "cuda", bulk_rows: int = 16384) -> None:
    """The step plan's order on the device: one packed engine gets a large bulk call, then a one-row
    interactive call; the interactive call must come back while the bulk call is still running. Steps are kept
    small (2,048 tokens) so the bulk call spans many of them. Order, not timing."""

    def run():
        import asyncio

        from embedtext.server.engine.base import EngineSettings

        async def race(backend, tok):
            bulk = [
                tok.encode(f"row {i} of a bulk scan over a table of documents " * 4).ids[:50] for i in range(bulk_rows)
            ]
            query = [tok.encode("an interactive search query").ids]
            finished: list[str] = []

            async def call(name, rows, interactive):
                await backend.embed(rows, interactive_rows=interactive)
                finished.append(name)

            bulk_task = asyncio.create_task(call("bulk", bulk, 0))
            await asyncio.sleep(0.5)  # the bulk rows are handed to the engine first
            await call("interactive", query, 1)
            bulk_done_first = bulk_task.done()
            await bulk_task
            return finished, bulk_done_first

        settings = EngineSettings(memory_fraction=0.1, max_batch_tokens=2048, max_num_seqs=64, device=device)
        (finished, bulk_done_first), _, _ = _on_engine(model, settings, race)
        assert finished == ["interactive", "bulk"] and not bulk_done_first, f"finish order {finished}"
        return f"a 1-row interactive call finished before a {bulk_rows}-row bulk call sent ahead of it"

    check("engine: a query's row overtakes a bulk call in the engine's steps", run)


def fake_gpu() -> None:
    """CPU rehearsal only: make vLLM believe it runs on an H100, so its config code runs (no kernels).

    Needs libcuda.so.1 loadable (rehearse.sh builds a stub with the driver symbols vLLM links)."""
    import vllm.platforms as platforms
    from vllm.platforms.cuda import NonNvmlCudaPlatform
    from vllm.platforms.interface import DeviceCapability

    class FakeH100(NonNvmlCudaPlatform):
        @classmethod
        def get_device_capability(cls, device_id=0):
            return DeviceCapability(major=9, minor=0)

        @classmethod
        def get_device_name(cls, device_id=0):
            return "NVIDIA H100 80GB HBM3 (fake)"

        @classmethod
        def get_device_total_memory(cls, device_id=0):
            return 80 * 2**30

        @classmethod
        def is_fully_connected(cls, physical_device_ids):
            return True

    platforms._current_platform = FakeH100()
