#!/usr/bin/env bash
# The GPU headline, unattended, on an offline GPU host (deploy/gpu/README.md): tokens/s of a BERT-base-shaped
# model at 50 and 512 tokens, through DuckDB and through the client alone, against vLLM's HTTP/JSON
# server. From the checkout's root, with the kit's parts in PARTS:
#
#   bash bench/gpu/headline.sh PARTS OUT [BUDGET_S]     # the whole run within BUDGET_S (default 540)
#
# 1. the kit's venv and the editable install, unless the venv already imports embedtext;
# 2. the device's bf16 matmul TFLOP/s (the ceiling's scale) and what the host is;
# 3. one packed engine in this process, its steps of 16,384 or 65,536 tokens, overlapped or one at a
#    time (bench/gpu/packed_overlap.py);
# 4. the runs in RUNS, in order, while time is left, each cut where the budget ends, each case written
#    when it ends. A run is rN (N replicas) with options: :packed or :stepped (the engine loop;
#    ENGINE_LOOP or the server's default, packed, otherwise), :http (vLLM's HTTP/JSON server too),
#    :pK (K server processes sharing the N replicas), :NAME=VALUE (a server setting, `--set`), :mps
#    (under CUDA's multi-process service, so that replicas' kernels may run at once). A run that names
#    no max_batch_tokens takes the step size the probe picked (its --step-for-runs): the larger one
#    only where it won at both row lengths. The default runs: one replica with steps of 16,384 tokens
#    (the last run's one packed replica left the GPU idle 38% of the time at 50 tokens: do overlapped
#    steps keep it busy?) and of 65,536 (its forward's host time was about the same a step at 50 and
#    512 tokens: fewer steps, less of it a row); 2; 8 under MPS (8 processes taking turns on the GPU
#    ran fewer tokens per busy second than one); 1 against vLLM's HTTP server; 8. The run `graphs` is the
#    probe again with --graphs (does replaying vLLM's CUDA graphs cut the forward's launch time?);
#    the default runs it after r2.
#    The runs share one workdir (WORK), so the model is made once;
# 5. beside them, GPU utilisation (nvidia-smi) and each process's host CPU, every 2 s; after each run,
#    both over each case's window (bench/gpu/summarize.py, OUT/summary.json).
# Everything lands under OUT as it goes: a run cut short keeps what it finished.
#
# On a CPU, rehearse the code path:
#   VENV=.venv GPU_MODEL=tiny ROWS=200 RUNS="r2 r2:stepped r1:http r2:p2" bash bench/gpu/headline.sh - OUT 900
set -uo pipefail
PARTS=$1
OUT=$2
BUDGET=${3:-540}
VENV=${VENV:-$HOME/gpu-venv}
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 VLLM_NO_USAGE_STATS=1 VLLM_DO_NOT_TRACK=1
mkdir -p "$OUT"
start=$SECONDS
left() { echo $((BUDGET - (SECONDS - start))); }
note() { echo "[$((SECONDS - start))s] $*" | tee -a "$OUT/headline.log"; }

if ! "$VENV/bin/python" -c "import embedtext.server" 2>/dev/null; then
  note "install from $PARTS"
  python3 deploy/gpu/install_wheels.py --parts "$PARTS" --venv "$VENV" >"$OUT/install.log" 2>&1 \
    && "$VENV/bin/pip" install -q --no-deps --no-index --no-build-isolation -e . >>"$OUT/install.log" 2>&1 \
    || { tail -5 "$OUT/install.log"; exit 1; }
fi
note "installed"

samplers=()
if command -v nvidia-smi >/dev/null; then
  nvidia-smi -L >"$OUT/device.txt" 2>&1
  nvidia-smi --query-gpu=timestamp,utilization.gpu,utilization.memory,memory.used,power.draw --format=csv -l 2 \
    >"$OUT/gpu-util.csv" 2>&1 &
  samplers+=($!)
fi
"$VENV/bin/python" bench/gpu/sample_cpu.py --every 2 >"$OUT/host-cpu.jsonl" 2>&1 &
samplers+=($!)
trap 'kill "${samplers[@]}" 2>/dev/null' EXIT

# The ceiling scales with the device's dense bf16 matmul rate: measure it (a few seconds).
timeout 60 "$VENV/bin/python" - >"$OUT/matmul.json" 2>>"$OUT/headline.log" <<'PY'
import json, time, torch
dev = "cuda" if torch.cuda.is_available() else "cpu"
n = 8192 if dev == "cuda" else 1024
a, b = (torch.randn(n, n, device=dev, dtype=torch.bfloat16) for _ in range(2))
for _ in range(3):
    a @ b
runs = 50 if dev == "cuda" else 3
torch.cuda.synchronize() if dev == "cuda" else None
t = time.perf_counter()
for _ in range(runs):
    a @ b
torch.cuda.synchronize() if dev == "cuda" else None
s = time.perf_counter() - t
name = torch.cuda.get_device_name() if dev == "cuda" else "cpu"
print(json.dumps({"device": name, "bf16_matmul_tflops": round(2 * n**3 * runs / s / 1e12, 1), "n": n}))
PY
note "matmul: $(cat "$OUT/matmul.json")"

# One packed engine in this process, in several ways side by side (bench/gpu/packed_overlap.py): its
# steps of 16,384 or 65,536 tokens overlapped (what an unpaced engine on a GPU does) or one at a time
# (does the device compute while the host prepares the next step, and do larger steps leave it more
# to compute?); with --graphs, replaying vLLM's CUDA graphs or launching each kernel.
device=cpu
command -v nvidia-smi >/dev/null && device=cuda
time_for() {  # NAME: the seconds the budget leaves it; false (and noted) under a minute
  local t
  t=$(left)
  if ((t < 60)); then
    note "$1: skipped, ${t}s left" >&2
    return 1
  fi
  echo "$t"
}
probe() {  # NAME [--graphs]: one probe, cut at 240 s or where the budget ends
  local name=$1 t
  shift
  t=$(time_for "$name") || return
  note "$name: one packed engine, its ways side by side $* (at most $((t < 240 ? t : 240))s)"
  timeout -k 10 $((t < 240 ? t : 240)) "$VENV/bin/python" bench/gpu/packed_overlap.py "${WORK:-$HOME/gpu-bench-work}" \
    "$OUT/$name.json" --gpu-model "${GPU_MODEL:-base}" --device $device ${ROWS:+--rows "$ROWS"} "$@" \
    >"$OUT/$name.log" 2>&1
  note "$name: exit $?"
  grep -E '^\{"command"' "$OUT/$name.log" | tee -a "$OUT/headline.log"
}
[[ ${OVERLAP_PROBE:-on} != on ]] || probe packed-overlap

STEP=""  # the step size of runs that name none: the probe's pick, else the server's default
if [[ -s $OUT/packed-overlap.json ]]; then
  STEP=$("$VENV/bin/python" bench/gpu/packed_overlap.py --step-for-runs "$OUT/packed-overlap.json")
  note "runs that name no max_batch_tokens take steps of ${STEP:-the default} tokens (the probe's pick)"
fi

run() {  # NAME ARGS...: one gpu-suite run, cut where the budget ends
  local name=$1 t
  shift
  t=$(time_for "$name") || return
  note "$name: $* (at most ${t}s)"
  timeout -k 10 "$t" "$VENV/bin/embedtext" bench --enforce-eager off --only gpu --gpu-model "${GPU_MODEL:-base}" \
    --workdir "${WORK:-$HOME/gpu-bench-work}" ${ROWS:+--rows "$ROWS"} ${LOOP:+--gpu-engine-loop "$LOOP"} "$@" \
    --json "$OUT/$name.json" \
    >"$OUT/$name.log" 2>&1
  note "$name: exit $?"
  grep -E "^gpu_|Error|error:" "$OUT/$name.log" | tee -a "$OUT/headline.log"
  "$VENV/bin/python" bench/gpu/summarize.py "$OUT" | tee -a "$OUT/headline.log"  # what limited each case
}

mps_start() {  # CUDA's multi-process service, where the host has it: false where it does not start
  command -v nvidia-cuda-mps-control >/dev/null || { note "no nvidia-cuda-mps-control here"; return 1; }
  nvidia-cuda-mps-control -d >>"$OUT/headline.log" 2>&1 || { note "the MPS daemon did not start"; return 1; }
}
mps_stop() { echo quit | nvidia-cuda-mps-control >>"$OUT/headline.log" 2>&1; }

for spec in ${RUNS:-r1:max_batch_tokens=16384 r1:max_batch_tokens=65536 r2 graphs r8:mps r1:http r8}; do
  if [[ $spec == graphs ]]; then
    probe packed-graphs --graphs
    continue
  fi
  replicas=${spec%%:*} opts=${spec#*:}
  [[ $spec == *:* ]] || opts=""
  args=(--replicas "${replicas#r}")
  LOOP=${ENGINE_LOOP:-} mps=""
  [[ ":$opts:" == *":http:"* ]] || args+=(--no-gpu-http)
  [[ -z $STEP || ":$opts:" == *":max_batch_tokens="* ]] || args+=(--gpu-set "max_batch_tokens=$STEP")
  for opt in ${opts//:/ }; do
    case $opt in
      packed | stepped) LOOP=$opt ;;
      p[0-9]*) args+=(--gpu-processes "${opt#p}") ;;
      *=*) args+=(--gpu-set "$opt") ;;
      http) ;;
      mps) mps=1 ;;
      *) note "$spec: unknown option $opt" ;;
    esac
  done
  name=${spec//:/-}
  [[ -z $mps ]] || mps_start || continue
  run "gpu-headline-${name//=/-}" "${args[@]}"
  [[ -z $mps ]] || mps_stop
done
note "done: $(ls "$OUT")"
