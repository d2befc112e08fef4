"""On the GPU machine (no network): reassemble the parts, verify them, install into a venv.

    python3 deploy/gpu/install_wheels.py --parts ~/gpu-wheels --venv ~/gpu-venv

``--parts`` holds ``manifest.json`` and ``part-000`` ...; each part's sha256 and the whole tar's
are checked against the manifest before anything is installed. The venv sees the machine's
python3 packages (torch 2.11.0 with its CUDA libraries, transformers, tokenizers, numpy ...) behind
its own: the machine's python3 is itself a venv, so ``--system-site-packages``
alone would not reach them; a .pth file adds them (``make_venv``). A wheel is installed
(``pip install --no-deps``) only when its distribution is missing there or older than the wheel;
vllm, duckdb, sqlglot and embedtext always are. Then ``import vllm, duckdb, sqlglot,
embedtext.server`` is checked. Stdlib only (pip and packaging come from the machine's python3).
Run it again with the same arguments and it redoes what is needed (parts already unpacked are
checked again).
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


def dist_key(name: str) -> str:
    """A distribution's name as pip compares it (PEP 503): ``Foo_Bar.baz`` -> ``foo-bar-baz``."""
    return re.sub(r"[-_.]+", "-", name).lower()


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
    bad = [p["name"] for p in manifest["parts"] if sha256(parts_dir / p["name"]) != p["sha256"]]
    if bad:
        sys.exit(f"sha256 mismatch (carry and copy them again): {', '.join(bad)}")
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
    """Distribution -> version as the venv's python sees them (its own first, then the machine's)."""
    code = (
        "import json, importlib.metadata as m\nd = {}\nfor x in m.distributions():\n"
        "    n = x.metadata['Name']\n    if n: d.setdefault(n.lower().replace('_', '-').replace('.', '-'), x.version)\n"
        "print(json.dumps(d))"
    )
    return json.loads(subprocess.run([python, "-c", code], check=True, capture_output=True, text=True).stdout)


def older(have: str, wheel: str) -> bool:
    try:
        from packaging.version import Version  # the machine has packaging; the fallback is rough

        return Version(have) < Version(wheel)
    except Exception:

        def key(v: str) -> tuple:
            return tuple(int(x) if x.isdigit() else -1 for x in re.split(r"[.+-]", v)[:4])

        return key(have) < key(wheel)


def _site_dirs() -> list[str]:
    """This interpreter's site-packages (the machine's python3 is itself a venv)."""
    import site
    import sysconfig

    dirs = [sysconfig.get_path("purelib"), sysconfig.get_path("platlib"), *site.getsitepackages()]
    return list(dict.fromkeys(d for d in dirs if Path(d).is_dir()))


def make_venv(venv: Path) -> str:
    """A venv that sees this interpreter's packages (torch & co.) behind its own.

    ``python -m venv --system-site-packages`` run from a venv (the machine's python3 is one)
    links the new venv to the BASE interpreter's site-packages, not to that venv's: torch,
    transformers ... would be invisible. So a .pth file in the new venv adds this interpreter's
    site-packages after the venv's own (``site.addsitedir``, so their .pth files run too).
    ``--without-pip``: the base python may lack ensurepip (Debian/Ubuntu); pip is taken from this
    interpreter's site-packages through that .pth, and bin/pip is a small shim.
    """
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    mine = [d for d in _site_dirs() if Path(d).resolve() != Path(purelib).resolve()]
    lines = "".join(f"import site; site.addsitedir({d!r})\n" for d in mine)
    (Path(purelib) / "_machine_site.pth").write_text(lines)
    has_pip = subprocess.run([str(python), "-c", "import pip"], capture_output=True).returncode == 0
    if not has_pip:  # the machine's python3 has pip (KINDS.md); if not, the base's ensurepip may
        subprocess.run([str(python), "-m", "ensurepip", "--default-pip"], check=True)
    pip = venv / "bin" / "pip"
    if not pip.exists():
        pip.write_text(f"#!{python}\nimport sys\nfrom pip._internal.cli.main import main\nsys.exit(main())\n")
        pip.chmod(0o755)
    check = subprocess.run(
        [str(python), "-c", "import torch, pip; print('torch', torch.__version__, 'pip', pip.__version__)"],
        capture_output=True,
        text=True,
    )
    print(check.stdout.strip() or check.stderr.strip().splitlines()[-1])
    if check.returncode:
        sys.exit(f"{venv} does not see torch or pip from {sys.executable}'s site-packages ({mine})")
    return str(python)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", required=True)
    parser.add_argument("--venv", required=True)
    args = parser.parse_args()
    manifest, wheels = reassemble(Path(args.parts).expanduser())
    python = make_venv(Path(args.venv).expanduser())
    have = _installed(python)
    todo, kept = [], []
    for w in manifest["wheels"]:
        name, version = w["file"].split("-")[:2]
        dist = dist_key(name)
        if dist in ALWAYS or dist not in have or older(have[dist], version):
            todo.append(str(wheels / w["file"]))
        else:
            kept.append(f"{dist} {have[dist]} (wheel {version})")
    print(
        f"installing {len(todo)} of {len(manifest['wheels'])} wheels into {args.venv}; the machine's own kept: "
        f"{', '.join(kept) or 'none'}"
    )
    subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--no-cache-dir",
            "--disable-pip-version-check",
            # No bytecode for every module of every wheel (a third of the install's time): the
            # check below imports what the server uses, and Python caches those as they load.
            "--no-compile",
            *todo,
        ],
        check=True,
    )
    # From outside the repo: in its root, the folder embedtext/ would shadow the wheel's package
    # (embedtext.server lives in server/; only the editable install's finder maps it there).
    subprocess.run(
        [python, "-c", "import vllm, duckdb, sqlglot, embedtext.server; print('vllm', vllm.__version__)"],
        check=True,
        cwd=Path(python).parents[1],
    )


if __name__ == "__main__":
    main()
