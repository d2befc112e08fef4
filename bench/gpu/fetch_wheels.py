"""On a machine WITH network: fetch the wheels the GPU machine lacks and split them into parts.

The GPU machine (no network, Python 3.12, torch 2.11.0 + CUDA 13, transformers, tokenizers,
grpcio, protobuf, pyarrow, numpy) takes at most 64 MiB of files per command, so:

1. ``requirements-gpu.txt`` (next to this file, committed) pins vLLM 0.25.1 (the last release
   on torch 2.11.0) with everything it and embedtext need, resolved for CPython 3.12 on
   manylinux x86_64 (``--recompile`` redoes it with ``uv pip compile``);
2. every pin except torch, its CUDA libraries and what the machine surely has is downloaded
   with ``pip download --no-deps --only-binary=:all:`` for that platform, and embedtext's own
   wheel is built;
3. the wheels are put in one tar, cut into parts under 60 MiB, with ``manifest.json``
   (sha256 of every part, of the whole tar, and of every wheel).

    python3 bench/gpu/fetch_wheels.py            # -> .gpu-wheels/part-000 ... + manifest.json

Then on the GPU machine: ``bash bench/gpu/install.sh`` (see bench/GPU.md).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

from install_wheels import sha256  # same folder; both run as scripts (stdlib only)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
REQUIREMENTS = HERE / "requirements-gpu.txt"
PART_BYTES = 60 * 1024 * 1024 - 1024 * 1024  # 59 MiB: under the 64 MiB a command may carry
TOP_LEVEL = [
    "vllm==0.25.1",
    # embedtext's own runtime dependencies (pyproject [project] dependencies)
    "grpcio>=1.85.1", "grpcio-health-checking>=1.85.1", "grpcio-reflection>=1.85.1", "protobuf>=7.35.1",
    "numpy>=1.26", "pyarrow>=17", "click>=8.1", "prometheus-client>=0.20", "tokenizers>=0.20", "duckdb>=1.4",
    "tqdm>=4.66", "sqlglot==30.30.0", "apscheduler>=3.10,<4",
    "torch==2.11.0",  # the machine's own; pinned so the resolution matches it
]
# Never shipped: the machine has them (torch 2.11.0 with its CUDA 13 libraries, and the rest), or
# they are large and only used on paths an encoder model does not take.
SKIP = re.compile(
    r"^(torch|torchaudio|torchvision|torchcodec|triton|nvidia-(?!ml-py).*|cuda-toolkit|cuda-tile|numpy|transformers|tokenizers|"
    r"huggingface-hub|hf-xet|safetensors|sentence-transformers|pyarrow|pytest|pynvvideocodec|opencv-python-headless|"
    r"flashinfer-cubin|tilelang|tokenspeed-.*|z3-solver|quack-kernels|humming-kernels|"
    r"anthropic|mcp|mcp-types|sentry-sdk|fastapi-cloud-cli|fastar|rignore)$"
)


def compile_requirements() -> None:
    source = HERE / ".requirements-gpu.in"
    source.write_text("\n".join(TOP_LEVEL) + "\n")
    subprocess.run(
        ["uv", "pip", "compile", str(source), "--python-version", "3.12", "--python-platform", "x86_64-manylinux_2_28",
         "--no-header", "--no-annotate", "-o", str(REQUIREMENTS)],
        check=True,
    )
    source.unlink()


def pins() -> list[tuple[str, str]]:
    out = []
    for line in REQUIREMENTS.read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            out.append((name.strip().lower(), version.strip().split(";")[0].strip()))
    return out


def download(wanted: list[str], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
           "--implementation", "cp", "--abi", "cp312", "--abi", "abi3", "--abi", "none",
           *[arg for minor in range(35, 4, -1) for arg in ("--platform", f"manylinux_2_{minor}_x86_64")],
           "--platform", "manylinux2014_x86_64", "--platform", "manylinux1_x86_64", "--platform", "linux_x86_64",
           "--platform", "any", "-d", str(dest), *wanted]
    subprocess.run(cmd, check=True)


def build_embedtext(dest: Path) -> None:
    subprocess.run(["uv", "build", "--wheel", "-o", str(dest), str(ROOT)], check=True)


def pack(wheels: Path, out: Path) -> dict:
    files = sorted(wheels.glob("*.whl"))
    tar_path = out / "wheels.tar"
    with tarfile.open(tar_path, "w") as tar:
        for f in files:
            tar.add(f, arcname=f.name)
    for old in out.glob("part-*"):
        old.unlink()
    parts = []
    with open(tar_path, "rb") as fh:
        for i, block in enumerate(iter(lambda: fh.read(PART_BYTES), b"")):
            part = out / f"part-{i:03d}"
            part.write_bytes(block)
            parts.append({"name": part.name, "bytes": len(block), "sha256": hashlib.sha256(block).hexdigest()})
    manifest = {
        "tar": {"name": tar_path.name, "bytes": tar_path.stat().st_size, "sha256": sha256(tar_path)},
        "parts": parts,
        "wheels": [{"file": f.name, "bytes": f.stat().st_size, "sha256": sha256(f)} for f in files],
    }
    tar_path.unlink()
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / ".gpu-wheels"))
    parser.add_argument("--recompile", action="store_true", help="re-resolve requirements-gpu.txt with uv")
    args = parser.parse_args()
    if args.recompile or not REQUIREMENTS.exists():
        compile_requirements()
    out = Path(args.out)
    wheels = out / "wheels"
    wanted = [f"{n}=={v}" for n, v in pins() if not SKIP.match(n)]
    skipped = [n for n, _ in pins() if SKIP.match(n)]
    print(f"{len(wanted)} wheels to fetch; skipped (on the machine, or unused by encoders): {', '.join(skipped)}")
    download(wanted, wheels)
    for old in wheels.glob("embedtext-*.whl"):
        old.unlink()
    build_embedtext(wheels)
    manifest = pack(wheels, out)
    total = sum(p["bytes"] for p in manifest["parts"])
    print(f"{len(manifest['wheels'])} wheels, {total / 2**20:.0f} MiB in {len(manifest['parts'])} parts under {out}")


if __name__ == "__main__":
    main()
