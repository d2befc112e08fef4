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
    """The vLLM API embedtext.server.engine.base and the bench use (bench/GPU.md, 'vLLM 0.25.1 vs 0.32')."""

    def engine_args():
        from vllm import AsyncEngineArgs

        fields = set(inspect.signature(AsyncEngineArgs).parameters)
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
        assert not missing, f"AsyncEngineArgs lacks {sorted(missing)}"
        return "runner/convert/... present"

    def pooling_params():
        from vllm import PoolingParams

        p = PoolingParams(task="embed", use_activation=False)
        PoolingParams(task="embed", use_activation=False, dimensions=32)
        return f"{p!r}"[:80]

    def tokens_input():
        from vllm.inputs import tokens_input

        return f"{tokens_input([101, 102])!r}"[:80]

    def async_llm():
        from vllm.v1.engine.async_llm import AsyncLLM

        assert hasattr(AsyncLLM, "from_engine_args")
        add = inspect.signature(AsyncLLM.add_request)
        abort = inspect.signature(AsyncLLM.abort)
        assert list(add.parameters)[1:4] == ["request_id", "prompt", "params"], f"add_request{add}"
        assert "internal" in abort.parameters, (
            f"abort{abort} has no 'internal' (server/engine/vllm_backend.py relies on external ids)"
        )
        assert "priority" in add.parameters, f"add_request{add} has no 'priority' (latency classes rely on it)"
        assert hasattr(AsyncLLM, "errored"), "AsyncLLM has no 'errored'"
        return f"add_request{add}"[:120]

    def collector():
        from vllm.v1.engine.output_processor import RequestOutputCollector

        missing = [m for m in ("get", "get_nowait", "close") if not hasattr(RequestOutputCollector, m)]
        assert not missing, f"RequestOutputCollector lacks {missing}"
        return "get/get_nowait/close"

    def exceptions():
        from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError  # noqa: F401

        try:
            from vllm.exceptions import VLLMValidationError  # noqa: F401

            return "VLLMValidationError present"
        except ImportError:
            return "no VLLMValidationError (server/engine/vllm_backend.py falls back to ValueError)"

    def llm_class():
        from vllm import LLM

        assert hasattr(LLM, "embed")
        return "LLM.embed present"

    def http_cli():
        from vllm.entrypoints.openai.cli_args import make_arg_parser
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        parser = make_arg_parser(FlexibleArgumentParser())
        argv = [
            "--model",
            "/tmp/m",
            "--served-model-name",
            "m",
            "--runner",
            "pooling",
            "--convert",
            "embed",
            "--dtype",
            "auto",
            "--gpu-memory-utilization",
            "0.2",
            "--max-model-len",
            "512",
            "--max-num-batched-tokens",
            "16384",
            "--max-num-seqs",
            "1024",
            "--no-enable-prefix-caching",
            "--disable-log-stats",
            "--uvicorn-log-level",
            "warning",
            "--host",
            "127.0.0.1",
            "--port",
            "8000",
        ]
        ns = parser.parse_args(argv)
        assert ns.runner == "pooling" and ns.convert == "embed" and ns.enable_prefix_caching is False
        return "bench/servers.py's api_server arguments parse"

    for name, fn in [
        ("AsyncEngineArgs fields", engine_args),
        ("PoolingParams(task='embed', use_activation=False)", pooling_params),
        ("vllm.inputs.tokens_input", tokens_input),
        ("AsyncLLM API", async_llm),
        ("RequestOutputCollector API", collector),
        ("engine exceptions", exceptions),
        ("vllm.LLM", llm_class),
    ]:
        check(f"api: {name}", fn)
    # vLLM's argument parser asks the platform for defaults: no GPU, no platform.
    check("api: api_server command line", http_cli, optional=not platform)


def engine_config(model: str, platform: bool, check: Check) -> None:
    def build():
        from vllm import AsyncEngineArgs

        from embedtext.server.engine.base import EngineSettings
        from embedtext.server.engine.vllm_backend import VllmBackend
        from embedtext.server.models import load_model_spec

        backend = VllmBackend(
            load_model_spec(model),
            EngineSettings(memory_fraction=0.2, max_batch_tokens=16384, max_num_seqs=1024, device="cuda"),
        )
        args = backend._engine_args()
        assert isinstance(args, AsyncEngineArgs)
        config = args.create_engine_config()
        mc = config.model_config
        return f"runner={mc.runner} convert={getattr(mc, 'convert', '?')} dtype={mc.dtype} arch={mc.architectures}"

    config = check("engine config (server/engine/vllm_backend.py's AsyncEngineArgs)", build, optional=not platform)

    def front_end():
        """What AsyncLLM.add_request does in the server's process, up to the EngineCore: vLLM's
        tokenizer for the model, InputProcessor on our token ids and PoolingParams, OutputProcessor."""
        from tokenizers import Tokenizer
        from vllm import AsyncEngineArgs, PoolingParams
        from vllm.inputs import tokens_input
        from vllm.renderers import renderer_from_config
        from vllm.v1.engine.input_processor import InputProcessor
        from vllm.v1.engine.output_processor import OutputProcessor, RequestOutputCollector

        from embedtext.server.engine.base import EngineSettings
        from embedtext.server.engine.vllm_backend import VllmBackend
        from embedtext.server.models import load_model_spec

        spec = load_model_spec(model)
        ids = Tokenizer.from_file(str(Path(spec.path) / "tokenizer.json")).encode("hello world").ids
        args = VllmBackend(
            spec, EngineSettings(memory_fraction=0.2, max_batch_tokens=16384, max_num_seqs=1024, device="cuda")
        )._engine_args()
        assert isinstance(args, AsyncEngineArgs)
        vllm_config = args.create_engine_config()
        renderer = renderer_from_config(vllm_config)
        processor = InputProcessor(vllm_config, renderer)
        request = processor.process_inputs(
            "check-1", tokens_input(ids), PoolingParams(task="embed", use_activation=False), supported_tasks=("embed",)
        )
        processor.assign_request_id(request)
        outputs = OutputProcessor(renderer.tokenizer, log_stats=False, stream_interval=1, tracing_enabled=False)
        outputs.add_request(
            request, None, None, 0, RequestOutputCollector(request.pooling_params.output_kind, request.request_id)
        )
        return f"tokenizer {type(renderer.tokenizer).__name__}, request {request.request_id}"

    if config:
        check("engine front end (tokenizer, InputProcessor, OutputProcessor)", front_end)


def engine_smoke(model: str, check: Check) -> None:
    """One AsyncLLM through VllmBackend, 3 rows, against sentence-transformers on the same GPU."""

    def run():
        import asyncio

        import numpy as np
        from tokenizers import Tokenizer

        from embedtext.server.engine.base import EngineSettings
        from embedtext.server.engine.vllm_backend import VllmBackend
        from embedtext.server.models import load_model_spec

        spec = load_model_spec(model)
        tok = Tokenizer.from_file(str(Path(spec.path) / "tokenizer.json"))
        texts = ["hello world", "a somewhat longer sentence about tables and embeddings", "x " * 40]
        rows = [tok.encode(t).ids for t in texts]
        backend = VllmBackend(
            spec, EngineSettings(memory_fraction=0.1, max_batch_tokens=16384, max_num_seqs=64, device="cuda")
        )

        async def go():
            t = time.perf_counter()
            await backend.start()
            started = time.perf_counter() - t
            try:
                return await backend.embed(rows), started
            finally:
                await backend.stop()

        vecs, started = asyncio.run(go())
        assert vecs.shape[0] == 3 and np.isfinite(vecs).all(), vecs.shape
        detail = f"shape {vecs.shape}, engine start {started:.0f}s"
        try:
            from sentence_transformers import SentenceTransformer

            ref = SentenceTransformer(str(spec.path), device="cuda").encode(texts, normalize_embeddings=True)
            ours = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
            cos = (ours * ref).sum(axis=1)
            detail += f", cosine vs sentence-transformers {cos.min():.4f}"
            assert cos.min() > 0.99, detail
        except ImportError:
            pass
        return detail

    check("engine: VllmBackend start + embed 3 rows", run)


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
