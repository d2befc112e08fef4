"""After install_wheels.py: check the GPU venv before the suite spends device time on it.

    ~/gpu-venv/bin/python deploy/gpu/check_imports.py                  # imports, API, CLI (~1 min)
    ~/gpu-venv/bin/python deploy/gpu/check_imports.py --model DIR      # + vLLM's engine config for DIR
    ~/gpu-venv/bin/python deploy/gpu/check_imports.py --model DIR --engine   # + one engine, 3 rows (GPU)

Prints one line per check (``ok`` / ``FAIL`` / ``skip``) and exits 1 if any check failed. It checks
the modules an encoder engine and our code path import (vLLM's v1 engine, worker, BERT, the
FlashAttention backend and its compiled kernels, the OpenAI server the HTTP baseline starts),
vLLM's and embedtext's declared requirements against what the venv sees, the vLLM API the
stepped engines use (argument names differ between vLLM releases), the HTTP baseline's command
line, and ``embedtext bench --help``. Without a GPU (the CPU rehearsal, deploy/gpu/rehearse.sh)
the compiled kernels cannot load (no libcuda.so.1) unless a stub is on LD_LIBRARY_PATH; the
engine steps need a GPU.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as md
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

# The vLLM API and engine checks, beside this script (it runs as a script, not from the package).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_checks import (  # noqa: E402
    api,
    attention_backends,
    engine_config,
    engine_smoke,
    fake_gpu,
    priority_order,
)

RESULTS: list[tuple[str, str, str]] = []

# Modules imported on the way to an encoder engine and by our code; each must import.
MODULES = [
    "torch",
    "transformers",
    "tokenizers",
    "nanotoken",
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
    "embedtext.server.scheduler.replicas",
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
# With --lean (fetch_wheels.py --lean): what that kit leaves out, and why an encoder does not miss it.
LEAN_UNMET = {
    "pycountry": "not shipped in a lean kit (pydantic-extra-types' country codes)",
}
LEAN_EXTENSIONS = {"vllm._moe_C_stable_libtorch", "vllm.vllm_flash_attn._vllm_fa2_C"}


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
        "nanotoken",
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


def requirements(lean: bool = False) -> None:
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
            (known if name in KNOWN_UNMET or (lean and name in LEAN_UNMET) else unmet).append(item)
        record(
            f"requirements of {top}",
            "FAIL" if unmet else "ok",
            ("unmet: " + "; ".join(unmet) + ". " if unmet else "")
            + ("known, fine: " + "; ".join(known) if known else ""),
        )


def cli() -> None:
    exe = Path(sys.executable).with_name("embedtext")
    for argv in (["bench", "--help"], ["bench", "--only", "gpu", "--help"], ["serve", "--help"]):

        def run(argv=argv):
            out = subprocess.run([str(exe), *argv], capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, (out.stderr or out.stdout)[-400:]
            return f"{len(out.stdout.splitlines())} lines"

        check(f"cli: embedtext {' '.join(argv)}", run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a model directory (embedtext make-model DIR) for the engine config step")
    parser.add_argument("--engine", action="store_true", help="also start one engine and embed 3 rows (GPU)")
    parser.add_argument(
        "--fake-gpu",
        action="store_true",
        help="CPU rehearsal: pretend vLLM's platform is an H100 (for the config steps)",
    )
    parser.add_argument(
        "--priority",
        action="store_true",
        help="also check that vLLM's priority scheduler puts a query ahead of bulk rows (starts an engine)",
    )
    parser.add_argument(
        "--attention-backends",
        default="",
        help="comma-separated vLLM attention backends (auto, FLASH_ATTN, FLEX_ATTENTION, TRITON_ATTN, ...): "
        "vLLM's own LLM.embed with each, against sentence-transformers (one engine each)",
    )
    parser.add_argument(
        "--lean",
        action="store_true",
        help="the kit came from fetch_wheels.py --lean: what it leaves out is reported, not failed",
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
        optional = not have_driver or (args.lean and mod in LEAN_EXTENSIONS)
        check(f"load {mod}", lambda mod=mod: importlib.import_module(mod) and None, optional=optional)
    requirements(args.lean)
    api(platform, check)
    cli()
    if args.model:
        engine_config(args.model, platform, check)
        if args.engine:
            engine_smoke(args.model, check)
        if args.attention_backends:
            attention_backends(args.model, args.attention_backends.split(","), check)
        if args.priority:
            priority_order(args.model, check, "cuda" if gpu else "cpu")
    failed = [n for n, s, _ in RESULTS if s == "FAIL"]
    print(
        f"\n{len(RESULTS) - len(failed)} of {len(RESULTS)} checks passed or skipped"
        + (f"; FAILED: {', '.join(failed)}" if failed else "")
    )
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
