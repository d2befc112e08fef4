#!/usr/bin/env bash
# Rehearse the GPU machine's install on a CPU machine (with PyPI), before spending device time.
#
#   bash deploy/gpu/rehearse.sh            # stand-in + fetch + install + checks (~5 min warm, ~15 cold)
#   REBUILD=1 bash deploy/gpu/rehearse.sh  # also rebuild the stand-in from scratch
#
# 1. A stand-in for the GPU machine's python3 (itself a venv, Python 3.12.3): a Python 3.12
#    venv with torch 2.11.0 (PyPI's default Linux wheel: +cu130, like the machine's) and the
#    machine's packages at the versions the GPU host reports (the others at
#    their latest); no pydantic, vLLM, duckdb, sqlglot (the machine has none).
# 2. fetch_wheels.py -> .gpu-wheels/ (parts + manifest), copied to a scratch ~/gpu-wheels.
# 3. install_wheels.py run by the stand-in's python (as the machine's python3 runs it), the
#    editable install from a copy of the working tree (what a command there runs in), as
#    deploy/gpu/README.md says.
# 4. check_imports.py: imports, vLLM's compiled extensions (against a stub libcuda.so.1: the
#    driver is the only library a CPU machine lacks), API, CLI, and vLLM's engine config for a
#    generated tiny model on a pretended H100 (--fake-gpu).
# Everything big lives under $WORK (default /tmp/gpu-rehearsal), outside the repo. uv runs with
# --no-config: the repo's [tool.uv] override-dependencies (torch==2.13.0) must not apply here.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
WORK=${WORK:-/tmp/gpu-rehearsal}
STANDIN=$WORK/standin          # the machine's python3 venv
PARTS=$WORK/gpu-wheels         # ~/gpu-wheels there
VENV=$WORK/gpu-venv            # ~/gpu-venv there
REPO=$WORK/repo                # the working-tree copy a command runs in
if [[ -z "${PY312:-}" ]]; then  # a working Python 3.12 (a pyenv shim may not be one)
  for c in python3.12 /usr/bin/python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12; do
    if "$c" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then PY312=$(command -v "$c"); break; fi
  done
fi
mkdir -p "$WORK"

if [[ -n "${REBUILD:-}" || ! -f $STANDIN/.built ]]; then
  rm -rf "$STANDIN"
  uv venv --no-config --python "$PY312" "$STANDIN"
  # KINDS.md's versions where it gives them; pip/setuptools/wheel because the machine has them.
  nice -n 10 uv pip install --no-config --python "$STANDIN/bin/python" \
    torch==2.11.0 torchvision==0.26.0 torchaudio==2.11.0 triton==3.6.0 numpy==2.5.2 tokenizers==0.23.2 \
    transformers==5.17.0 huggingface_hub==1.33.0 safetensors==0.8.0 sentence-transformers==6.0.1 \
    sentencepiece==0.2.2 tiktoken==0.14.0 accelerate==1.15.0 cupy-cuda13x==14.2.0 typer==0.28.0 \
    grpcio protobuf pyarrow psutil prometheus-client click rich tqdm pyyaml requests aiohttp aiofiles httpx \
    jinja2 msgpack uvloop regex pillow filelock fsspec packaging cloudpickle py-cpuinfo pip setuptools wheel \
    einops opencv-python-headless numba llvmlite scipy pandas scikit-learn ml-dtypes sympy networkx \
    cuda-bindings cuda-core cuda-pathfinder cuda-toolkit nvidia-ml-py pytest pytest-timeout hypothesis six \
    python-dateutil hf-xet xxhash typing-extensions werkzeug zipp h5py onnx tabulate simplejson portalocker \
    lxml matplotlib wrapt colorama
  # The machine has no pydantic (typer 0.29 would pull it in; 0.28 does not).
  uv pip uninstall --no-config --python "$STANDIN/bin/python" pydantic pydantic-core typing-inspection annotated-types || true
  touch "$STANDIN/.built"
fi
uv pip freeze --no-config --python "$STANDIN/bin/python" > "$WORK/standin-freeze.txt"
"$STANDIN/bin/python" -c "import torch; print('stand-in: torch', torch.__version__, 'CUDA', torch.version.cuda)"

# 2. Here: fetch (the machine's freeze could be given with --have; the stand-in's would hide
#    what the real machine may lack, so not here).
nice -n 10 python3 deploy/gpu/fetch_wheels.py ${RECOMPILE:+--recompile}
rm -rf "$PARTS" "$VENV" "$REPO"
mkdir -p "$PARTS" "$REPO"
cp .gpu-wheels/manifest.json .gpu-wheels/part-* "$PARTS"/
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$REPO"
echo "carried per command at most: $(du -cb .gpu-wheels/part-000 .gpu-wheels/manifest.json | tail -1 | cut -f1) bytes" \
     "+ working tree $(du -sb "$REPO" | cut -f1) bytes (limit $((64 * 1024 * 1024)))"

# 3. There: exactly deploy/gpu/README.md's install command, with the stand-in's python as python3.
cd "$REPO"
time nice -n 10 "$STANDIN/bin/python" deploy/gpu/install_wheels.py --parts "$PARTS" --venv "$VENV"
"$VENV/bin/pip" install --no-deps --no-index --no-build-isolation -e .

# 4. The checks (a stub libcuda.so.1 with the driver symbols vLLM's extensions link; CPU only).
STUB=$WORK/cudastub
if [[ ! -f $STUB/libcuda.so.1 ]]; then
  mkdir -p "$STUB"
  find "$VENV"/lib/python3.12/site-packages/vllm -name '*.so' -print0 | xargs -0 -n1 nm -D --undefined-only \
    | awk '{print $2}' | sed 's/@.*//' | grep -E '^cu[A-Z]' | sort -u | sed 's/.*/int &(void){return 999;}/' \
    > "$STUB/stub.c"
  gcc -shared -fPIC -o "$STUB/libcuda.so.1" -Wl,-soname,libcuda.so.1 "$STUB/stub.c"
fi
[[ -d $WORK/tiny-model ]] || "$VENV/bin/embedtext" make-model "$WORK/tiny-model"
echo "== check_imports.py as on the GPU machine (no GPU here: driver-bound checks skip)"
"$VENV/bin/python" deploy/gpu/check_imports.py --model "$WORK/tiny-model"
echo "== with a stub libcuda.so.1 and a pretended H100"
LD_LIBRARY_PATH=$STUB "$VENV/bin/python" deploy/gpu/check_imports.py --model "$WORK/tiny-model" --fake-gpu
echo "rehearsal passed; parts: $(ls "$ROOT"/.gpu-wheels/part-* | wc -l), $(du -cm "$ROOT"/.gpu-wheels/part-* | tail -1 | cut -f1) MiB"
