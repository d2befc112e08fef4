#!/usr/bin/env bash
# Build the DuckDB extension (udf/extension) in one command: cargo build --release, then DuckDB's
# metadata footer. Needs Rust's cargo (https://rustup.rs). Prints the extension's path last.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --manifest-path udf/extension/Cargo.toml >&2
release=udf/extension/target/release
library="$release/libembedtext.so"
[ -f "$library" ] || library="$release/libembedtext.dylib"
python3 scripts/extension_footer.py "$library" "$release/embedtext.duckdb_extension"
echo "$PWD/$release/embedtext.duckdb_extension"
