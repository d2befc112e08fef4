"""On the GPU machine (no network): reassemble the parts, verify them, install into a venv.

    python3 bench/gpu/install_wheels.py --parts ~/gpu-wheels --venv ~/gpu-venv

``--parts`` holds ``manifest.json`` and ``part-000`` ...; each part's sha256 and the whole tar's
are checked against the manifest before anything is installed. The venv is made with
``--system-site-packages`` (the machine's torch 2.11.0, CUDA libraries, transformers, tokenizers
stay as they are), and a wheel is installed (``pip install --no-deps``) only when its
distribution is missing there or older than the wheel; vllm, duckdb, sqlglot and embedtext
always are. Stdlib only.
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

ALWAYS = {"vllm", "duckdb", "sqlglot", "embedtext"}


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def reassemble(parts_dir: Path) -> tuple[dict, Path]:
    manifest = json.loads((parts_dir / "manifest.json").read_text())
    missing = [p["name"] for p in manifest["parts"] if not (parts_dir / p["name"]).exists()]
    if missing:
        sys.exit(f"missing parts: {', '.join(missing)}")
    for p in manifest["parts"]:
        if sha256(parts_dir / p["name"]) != p["sha256"]:
            sys.exit(f"{p['name']}: sha256 mismatch (copy it again)")
    tar_path = parts_dir / manifest["tar"]["name"]
    with open(tar_path, "wb") as out:
        for p in manifest["parts"]:
            out.write((parts_dir / p["name"]).read_bytes())
    if sha256(tar_path) != manifest["tar"]["sha256"]:
        sys.exit("the reassembled tar's sha256 does not match the manifest")
    wheels = parts_dir / "wheels"
    wheels.mkdir(exist_ok=True)
    with tarfile.open(tar_path) as tar:
        tar.extractall(wheels, filter="data")
    tar_path.unlink()
    for w in manifest["wheels"]:
        if sha256(wheels / w["file"]) != w["sha256"]:
            sys.exit(f"{w['file']}: sha256 mismatch")
    return manifest, wheels


def _installed(python: str) -> dict[str, str]:
    code = ("import json, importlib.metadata as m; print(json.dumps({d.metadata['Name'].lower().replace('_', '-'): "
            "d.version for d in m.distributions() if d.metadata['Name']}))")
    return json.loads(subprocess.run([python, "-c", code], check=True, capture_output=True, text=True).stdout)


def _version_key(v: str) -> tuple:
    return tuple(int(x) if x.isdigit() else -1 for x in re.split(r"[.+-]", v)[:4])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", required=True)
    parser.add_argument("--venv", required=True)
    args = parser.parse_args()
    manifest, wheels = reassemble(Path(args.parts).expanduser())
    venv = Path(args.venv).expanduser()
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    have = _installed(python)
    todo = []
    for w in manifest["wheels"]:
        name, version = w["file"].split("-")[:2]
        dist = name.lower().replace("_", "-")
        if dist in ALWAYS or dist not in have or _version_key(have[dist]) < _version_key(version):
            todo.append(str(wheels / w["file"]))
    print(f"installing {len(todo)} of {len(manifest['wheels'])} wheels into {venv}")
    subprocess.run([python, "-m", "pip", "install", "--no-deps", "--no-index", "--no-cache-dir", *todo], check=True)
    subprocess.run([python, "-c", "import vllm, duckdb, sqlglot, embedtext.server; print('vllm', vllm.__version__)"],
                   check=True)


if __name__ == "__main__":
    main()
