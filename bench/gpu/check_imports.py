"""After install_wheels.py: check the GPU venv before the suite spends device time on it.

    ~/gpu-venv/bin/python bench/gpu/check_imports.py                  # imports, API, CLI (~1 min)
    ~/gpu-venv/bin/python bench/gpu/check_imports.py --model DIR      # + vLLM's engine config for DIR
    ~/gpu-venv/bin/python bench/gpu/check_imports.py --model DIR --engine   # + one engine, 3 rows (GPU)

Prints one line per check (``ok`` / ``FAIL`` / ``skip``) and exits 1 if any check failed. It checks
the modules an encoder engine and our code path import (vLLM's v1 engine, worker, BERT, the
FlashAttention backend and its compiled kernels, the OpenAI server the HTTP baseline starts),
vLLM's and embedtext's declared requirements against what the venv sees, the vLLM API
server/engine/vllm_backend.py uses (argument names differ between vLLM releases), the HTTP baseline's command
line, and ``embedtext bench --help``. Without a GPU (the CPU rehearsal, bench/gpu/rehearse.sh)
the compiled kernels cannot load (no libcuda.so.1) unless a stub is on LD_LIBRARY_PATH; the
engine steps need a GPU.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as md
import inspect
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

RESULTS: list[tuple[str, str, str]] = []

# Modules imported on the way to an encoder engine and by our code; each must import.
MODULES = [
    "torch",
    "transformers",
    "tokenizers",
    "numpy",
    "grpc",
    "google.protobuf",
    "pyarrow",
    "duckdb",
    "sqlglot",
    "vllm",
    "vllm.envs",
    "vllm.config",
    "vllm.engine.arg_utils",
    "vllm.inputs",
    "vllm.pooling_params",
    "vllm.outputs",
    "vllm.exceptions",
    "vllm.platforms",
    "vllm.v1.engine.async_llm",
    "vllm.v1.engine.core",
    "vllm.v1.engine.core_client",
    "vllm.v1.engine.exceptions",
    "vllm.v1.engine.output_processor",
    "vllm.v1.executor.uniproc_executor",
    "vllm.v1.worker.gpu_worker",
    "vllm.v1.worker.gpu_model_runner",
    "vllm.model_executor.models.bert",
    "vllm.model_executor.layers.pooler",
    "vllm.v1.attention.backends.flash_attn",
    "vllm.v1.attention.backends.flex_attention",
    "vllm.v1.attention.backends.triton_attn",
    "vllm.entrypoints.llm",
    "vllm.entrypoints.openai.api_server",
    "vllm.entrypoints.openai.cli_args",
    "embedtext",
    "embedtext.protocol",
    "embedtext.server",
    "embedtext.server.app",
    "embedtext.server.engine.base",
    "embedtext.server.engine.process_backend",
    "embedtext.server.engine.worker",
    "embedtext.server.replicas",
    "embedtext.connectors.client",
    "embedtext.udf",
    "embedtext.sql",
    "embedtext.cli",
    "embedtext.bench.cli",
    "embedtext.bench.gpu_suite",
    "embedtext.bench.inprocess",
    "embedtext.bench.servers",
]
# Imported lazily by vLLM on some paths; a failure is reported, not fatal.
OPTIONAL = ["flashinfer", "numba", "vllm.v1.attention.backends.flashinfer", "xgrammar", "cv2"]
# vLLM's compiled extensions; they need libcuda.so.1 (the driver), which only a GPU machine has.
# (vLLM 0.25.1's wheel is built for CUDA 13: libcudart.so.13, libnvrtc.so.13, as torch 2.11.0+cu130.)
EXTENSIONS = [
    "vllm._C_stable_libtorch",
    "vllm._moe_C_stable_libtorch",
    "vllm.cumem_allocator",
    "vllm.vllm_flash_attn._vllm_fa2_C",
    "vllm.vllm_flash_attn._vllm_fa3_C",
    "vllm.vllm_flash_attn",
    "vllm.platforms.cuda",
]
# Declared requirements of vLLM 0.25.1 that are knowingly not met; why it is fine.
KNOWN_UNMET = {
    "numba": "vLLM pins numba==0.65.0 (numpy<2.5); the machine's own numba stays (n-gram spec decoding only)",
    "setuptools": "vLLM wants setuptools<81; not imported at run time",
    "torchcodec": "not shipped (video decoding)",
    "pynvvideocodec": "not shipped (video decoding)",
    "flashinfer-cubin": "not shipped (FlashInfer's prebuilt kernels; BERT uses FlashAttention)",
    "tilelang": "not shipped",
    "quack-kernels": "not shipped",
    "humming-kernels": "not shipped",
    "tokenspeed-mla": "not shipped (MLA decode kernels)",
    "nvidia-cutlass-dsl": "not shipped (CuTe DSL kernels)",
    "nvidia-cudnn-frontend": "not shipped",
    "anthropic": "not shipped (Anthropic API endpoint)",
    "mcp": "not shipped (tool server)",
    "opencv-python-headless": "the machine's own (any version)",
}


def record(name: str, status: str, detail: str = "") -> None:
    RESULTS.append((name, status, detail))
    print(f"{status:4}  {name}{'  ' + detail if detail else ''}", flush=True)


def check(name: str, fn, *, optional: bool = False) -> object:
    t = time.perf_counter()
    try:
        out = fn()
    except BaseException as exc:  # noqa: BLE001 - report everything, SystemExit included
        if isinstance(exc, KeyboardInterrupt):
            raise
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        record(name, "skip" if optional else "FAIL", last[:400])
        if not optional and os.environ.get("CHECK_TRACEBACK"):
            traceback.print_exc()
        return None
    record(name, "ok", f"{out if isinstance(out, str) else ''} ({time.perf_counter() - t:.1f}s)".strip())
    return out if out is not None else True


def where(dist: str) -> str:
    try:
        d = md.distribution(dist)
    except md.PackageNotFoundError:
        return "missing"
    loc = str(d.locate_file(""))
    side = "venv" if loc.startswith(sys.prefix) else "machine"
    return f"{d.version} ({side})"


def environment() -> None:
    import platform

    print(f"python {platform.python_version()} {sys.executable} prefix={sys.prefix}")
    for dist in [
        "torch",
        "triton",
        "vllm",
        "transformers",
        "tokenizers",
        "huggingface-hub",
        "safetensors",
        "numpy",
        "numba",
        "protobuf",
        "grpcio",
        "pyarrow",
        "duckdb",
        "sqlglot",
        "pydantic",
        "fastapi",
        "pyzmq",
        "msgspec",
        "setuptools",
        "sentence-transformers",
        "embedtext",
    ]:
        print(f"  {dist:24} {where(dist)}")


def requirements() -> None:
    """vLLM's and embedtext's Requires-Dist (no extras) against the installed versions."""
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.version import Version

    env = default_environment()
    for top in ("vllm", "embedtext"):
        try:
            reqs = md.requires(top) or []
        except md.PackageNotFoundError:
            record(f"requirements of {top}", "FAIL", "not installed")
            continue
        unmet, known = [], []
        for line in reqs:
            req = Requirement(line)
            if req.marker and not req.marker.evaluate({**env, "extra": ""}):
                continue
            name = req.name.lower().replace("_", "-")
            try:
                have = md.version(req.name)
            except md.PackageNotFoundError:
                have = None
            if have is not None and (not req.specifier or req.specifier.contains(Version(have), prereleases=True)):
                continue
            item = f"{req.name}{req.specifier} (have {have or 'none'})"
            (known if name in KNOWN_UNMET else unmet).append(item)
        record(
            f"requirements of {top}",
            "FAIL" if unmet else "ok",
            ("unmet: " + "; ".join(unmet) + ". " if unmet else "")
            + ("known, fine: " + "; ".join(known) if known else ""),
        )


def api(platform: bool) -> None:
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


def cli() -> None:
    exe = Path(sys.executable).with_name("embedtext")
    for argv in (["bench", "--help"], ["bench", "--only", "gpu", "--help"], ["serve", "--help"]):

        def run(argv=argv):
            out = subprocess.run([str(exe), *argv], capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, (out.stderr or out.stdout)[-400:]
            return f"{len(out.stdout.splitlines())} lines"

        check(f"cli: embedtext {' '.join(argv)}", run)


def engine_config(model: str, platform: bool) -> None:
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


def engine_smoke(model: str) -> None:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a model directory (embedtext make-model DIR) for the engine config step")
    parser.add_argument("--engine", action="store_true", help="also start one engine and embed 3 rows (GPU)")
    parser.add_argument(
        "--fake-gpu",
        action="store_true",
        help="CPU rehearsal: pretend vLLM's platform is an H100 (for the config steps)",
    )
    args = parser.parse_args()
    environment()
    import torch

    gpu = torch.cuda.is_available()
    print(
        f"torch {torch.__version__} CUDA {torch.version.cuda} GPU: {torch.cuda.get_device_name(0) if gpu else 'none'}",
        flush=True,
    )
    have_driver = gpu or any(
        (Path(d) / "libcuda.so.1").exists() for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d
    )
    if args.fake_gpu and not gpu:
        check("fake H100 platform (CPU rehearsal)", fake_gpu)
    platform = gpu or args.fake_gpu
    for mod in MODULES:
        check(f"import {mod}", lambda mod=mod: importlib.import_module(mod) and None)
    for mod in OPTIONAL:
        check(f"import {mod} (optional)", lambda mod=mod: importlib.import_module(mod) and None, optional=True)
    for mod in EXTENSIONS:
        check(f"load {mod}", lambda mod=mod: importlib.import_module(mod) and None, optional=not have_driver)
    requirements()
    api(platform)
    cli()
    if args.model:
        engine_config(args.model, platform)
        if args.engine:
            engine_smoke(args.model)
    failed = [n for n, s, _ in RESULTS if s == "FAIL"]
    print(
        f"\n{len(RESULTS) - len(failed)} of {len(RESULTS)} checks passed or skipped"
        + (f"; FAILED: {', '.join(failed)}" if failed else "")
    )
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
