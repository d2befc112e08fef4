#!/usr/bin/env bash
# On the GPU host, from the checkout's root, with every part of the kit in PARTS:
#
#   bash bench/gpu/host_run.sh install PARTS          # the venv (~/gpu-venv) and the editable install (~1 min)
#   bash bench/gpu/host_run.sh checks  OUTDIR         # imports, engine smoke, attention backends, priority (~3 min)
#   bash bench/gpu/host_run.sh mixed   OUTDIR [S]     # the mixed suite, --quick --compiled, cut at S seconds (default 500)
#   bash bench/gpu/host_run.sh profile OUTDIR [WHEEL] # py-spy on a default server under queries and bulk work (~2 min)
#   bash bench/gpu/host_run.sh replicas OUTDIR [N] [S] # the GPU suite's bulk rows/s at N replicas (default 4), with
#                                                     # no target and then paced to the default 20 ms, each cut at S s
#
# SERVE_ARGS="--set interactive_replica=off" adds arguments to the profiled server's.
# MODES=classes,unpaced picks the mixed suite's servers (default: the GPU_MODES of
# bench/mixed.py; each compiled server takes a minute or more to start, one after another).
#
# The mixed step compiles its engines (CUDA graphs, as a server runs by default): a quick run's
# eager engines pay more per step, and pacing's cost grows with that (EAGER=1 for eager ones).
#
# Each step writes its whole log under OUTDIR and prints the lines worth reading; a step cut
# short still leaves each finished phase's p50/p99 and rows/s in mixed.log.
set -uo pipefail
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 VLLM_NO_USAGE_STATS=1 VLLM_DO_NOT_TRACK=1
VENV=${VENV:-$HOME/gpu-venv}
step=$1
shift
case $step in
  install)
    nvidia-smi -L && ldd --version | head -1
    python3 bench/gpu/install_wheels.py --parts "$1" --venv "$VENV" 2>&1 | tail -4
    "$VENV/bin/pip" install -q --no-deps --no-index --no-build-isolation -e . >/dev/null 2>&1 \
      && echo "editable install: ok"
    ;;
  checks)
    mkdir -p "$1"
    timeout -k 10 400 "$VENV/bin/python" bench/gpu/check_imports.py --model default --engine --priority \
      --attention-backends auto,FLEX_ATTENTION --lean 2>&1 | tee "$1/checks.log" | grep -E "^(FAIL|skip)|^ok +engine|checks passed"
    ;;
  mixed)
    mkdir -p "$1"
    compiled=--compiled
    [[ -n ${EAGER:-} ]] && compiled=
    modes=()
    [[ -n ${MODES:-} ]] && modes=(--mixed-modes "$MODES")
    timeout -k 10 "${2:-500}" "$VENV/bin/embedtext" bench --quick $compiled --only mixed "${modes[@]}" \
      --json "$1/mixed-quick.json" 2>&1 | tee "$1/mixed.log" | grep -E "mixed:|Error|warning|cannot hold"
    ;;
  profile)
    # py-spy is not in the kit: install its wheel (carried beside the kit) into the venv first.
    mkdir -p "$1"
    [[ -n ${2:-} ]] && "$VENV/bin/pip" install -q --no-deps --no-index "$2"
    # SERVE_ARGS: more `embedtext serve` arguments for the profiled server (word-split).
    # shellcheck disable=SC2086
    timeout -k 10 300 "$VENV/bin/python" bench/gpu/profile_server.py --out "$1/profile" ${SERVE_ARGS:+-- $SERVE_ARGS} 2>&1 \
      | tee "$1/profile.log" | grep -E "^(idle|bulk):|wrote|failed|Error|error"
    # py-spy's raw stacks in one file: a transfer may bring back only a few files.
    (cd "$1/profile" && tar czf ../profile-raw.tgz --remove-files ./*.raw)
    ;;
  replicas)
    # What several replicas keep of their bulk rows/s when they hold the GPU's default target.
    mkdir -p "$1"
    n=${2:-4}
    for paced in "" --gpu-paced; do
      name=gpu-r$n${paced:+-paced}
      timeout -k 10 "${3:-270}" "$VENV/bin/embedtext" bench --quick --compiled --only gpu --replicas "$n" \
        --no-gpu-http $paced ${GPU_MODEL:+--gpu-model "$GPU_MODEL"} ${ROWS:+--rows "$ROWS"} --json "$1/$name.json" \
        2>&1 | tee "$1/$name.log" | grep -E "^gpu_|rows/s|Error"
    done
    ;;
  *)
    echo "usage: $0 install PARTS | checks OUTDIR | mixed OUTDIR [SECONDS] | profile OUTDIR [WHEEL] | replicas OUTDIR [N] [SECONDS]" >&2
    exit 2
    ;;
esac
