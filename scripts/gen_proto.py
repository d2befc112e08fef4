"""Regenerate protocol/embedding_pb2*.py from protocol/embedding.proto.

The proto is compiled from a temporary tree laid out as embedtext/protocol/ so that the
generated gRPC module imports ``embedtext.protocol.embedding_pb2`` (the import root we
ship), then the outputs are copied next to the .proto. grpcio-tools is pinned in
pyproject.toml so the output is reproducible; tests/unit/protocol/test_generated_fresh.py
fails when the committed files drift from what this script produces.

Usage: python scripts/gen_proto.py [--out DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO = ROOT / "protocol" / "embedding.proto"
OUTPUTS = ("embedding_pb2.py", "embedding_pb2.pyi", "embedding_pb2_grpc.py")


def generate(out_dir: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp)
        pkg = tree / "embedtext" / "protocol"
        pkg.mkdir(parents=True)
        shutil.copy(PROTO, pkg / PROTO.name)
        include = Path(protoc.__file__).parent / "_proto"
        rc = protoc.main(
            [
                "grpc_tools.protoc",
                f"-I{tree}",
                f"-I{include}",
                f"--python_out={tree}",
                f"--pyi_out={tree}",
                f"--grpc_python_out={tree}",
                f"embedtext/protocol/{PROTO.name}",
            ]
        )
        if rc != 0:
            raise SystemExit(f"protoc failed with exit code {rc}")
        out_dir.mkdir(parents=True, exist_ok=True)
        for name in OUTPUTS:
            shutil.copy(pkg / name, out_dir / name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "protocol")
    args = parser.parse_args(argv)
    generate(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
