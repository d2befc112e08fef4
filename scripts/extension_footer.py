"""Append DuckDB's metadata footer to the shared object cargo built, making it a loadable extension file
(unsigned: DuckDB loads it where unsigned extensions are allowed). scripts/build_extension.sh runs it.

The footer holds eight 32-byte fields, last first (metadata version, platform, C API version,
extension version, ABI type, three empty), then 256 bytes for a signature, left empty.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import sys

# The C API version the extension asks DuckDB for (udf/extension/src/lib.rs C_API_VERSION).
C_API_VERSION = "v1.5.6"
SECTION_START = b"\x00\x93\x04\x10duckdb_signature\x80\x04"


def duckdb_platform() -> str:
    os_name = {"linux": "linux", "darwin": "osx"}.get(sys.platform, sys.platform)
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower(), platform.machine().lower()
    )
    return f"{os_name}_{arch}"


def footer(extension_version: str, target_platform: str) -> bytes:
    fields = ["4", target_platform, C_API_VERSION, extension_version, "C_STRUCT", "", "", ""]
    body = b"".join(f.encode("ascii").ljust(32, b"\x00")[:32] for f in reversed(fields))
    return SECTION_START + body + b"\x00" * 256


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shared_object", help="what cargo built (libembedtext.so or .dylib)")
    parser.add_argument("output")
    parser.add_argument("--version", default="v0.1.0")
    parser.add_argument("--platform", default=duckdb_platform())
    args = parser.parse_args()
    shutil.copyfile(args.shared_object, args.output)
    with open(args.output, "ab") as out:
        out.write(footer(args.version, args.platform))


if __name__ == "__main__":
    main()
