"""One packed engine in this process, its steps overlapped (each launched while the last one
computes: what an unpaced engine on a GPU does) or one at a time, in rotating rounds: rows/s, the
engine thread's CPU a row, and how close the two ways' vectors are. The GPU headline runs it first
(bench/gpu/headline.sh); on a CPU it rehearses the code path (there a launch computes, so nothing
overlaps):

    python bench/gpu/packed_overlap.py WORKDIR OUT.json [--gpu-model base] [--rows 200000] [--rounds 3] [--device cuda]

The model is the gpu suite's (``--gpu-model``), made in WORKDIR unless that already holds it.

Batches go as the server sends bulk work: 1,024 rows each, 4 in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from embedtext.server.engine.base import ENGINE_THREAD_NAME, EngineSettings
from embedtext.server.engine.frames import TokenRows

BATCH_ROWS = 1024
IN_FLIGHT = 4
TOKENS = (50, 512)
COMPARED_ROWS = 2048  # the rows whose vectors both ways are compared


def engine_thread_cpu_s() -> float:
    """The engine thread's CPU seconds so far (/proc, by the thread's name)."""
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                if f.read().strip() != ENGINE_THREAD_NAME[:15]:
                    continue
            with open(f"/proc/self/task/{task}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    raise RuntimeError("no engine thread")


def random_rows(count: int, tokens: int, vocab: int, seed: int) -> TokenRows:
    rng = np.random.default_rng(seed)
    ids = rng.integers(vocab // 10, vocab, size=count * tokens, dtype=np.int32)  # above the special tokens
    return TokenRows(ids, np.full(count, tokens, dtype=np.int64))


async def embed_all(backend, rows: TokenRows) -> np.ndarray:
    """Every row embedded; the vectors of the first ``COMPARED_ROWS`` kept (the rest dropped as they come)."""
    gate = asyncio.Semaphore(IN_FLIGHT)
    kept: dict[int, np.ndarray] = {}

    async def one(start: int) -> None:
        async with gate:
            vectors = await backend.embed(rows.slice(start, min(start + BATCH_ROWS, len(rows.lengths))))
        if start < COMPARED_ROWS:
            kept[start] = vectors

    await asyncio.gather(*(one(s) for s in range(0, len(rows.lengths), BATCH_ROWS)))
    return np.concatenate([kept[s] for s in sorted(kept)])[:COMPARED_ROWS]


def least_cosine(a: np.ndarray, b: np.ndarray) -> float:
    dots = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return float(dots.min())


async def run(args, spec) -> dict:
    from embedtext.server.engine.packed_backend import PackedVllmBackend

    settings = EngineSettings(
        memory_fraction=args.memory_fraction,
        max_batch_tokens=args.max_batch_tokens,
        max_num_seqs=1024,
        device=args.device,
        enforce_eager=args.device == "cpu",
    )
    backend = PackedVllmBackend(spec, settings, name="overlap-probe")
    started = time.perf_counter()
    await backend.start()
    out: dict = {"engine_start_s": round(time.perf_counter() - started, 1), "cases": []}
    try:
        if backend.packed is None:
            return out | {"error": "the packed check failed: the engine fell back to vLLM's requests"}
        out["overlaps_by_default"] = backend.overlaps_steps
        vocab = backend.packed.vocab_size
        sets = {t: random_rows(args.rows if t == 50 else args.rows // 10, t, vocab, seed=t) for t in TOKENS}
        for rows in sets.values():  # warm both ways (compiles and allocations)
            for overlap in (False, True):
                backend.overlaps_steps = overlap
                await embed_all(backend, rows.slice(0, min(len(rows.lengths), BATCH_ROWS * IN_FLIGHT)))
        vectors: dict = {}
        for round_ in range(args.rounds):
            for tokens, rows in sets.items():
                ways = (False, True) if round_ % 2 == 0 else (True, False)
                for overlap in ways:
                    backend.overlaps_steps = overlap
                    cpu0, t0 = engine_thread_cpu_s(), time.perf_counter()
                    got = await embed_all(backend, rows)
                    seconds, cpu, ended = time.perf_counter() - t0, engine_thread_cpu_s() - cpu0, time.time()
                    if round_ == 0:
                        vectors[tokens, overlap] = got
                    count = len(rows.lengths)
                    case = {
                        "name": f"packed_{'overlapped' if overlap else 'serial'}_{tokens}tok_round{round_}",
                        "engine_loop": "packed, overlapped" if overlap else "packed",
                        "tokens_per_row": tokens,
                        "overlapped": overlap,
                        "round": round_,
                        "rows": count,
                        "rows_per_s": round(count / seconds, 1),
                        "tokens_per_s": round(count * tokens / seconds),
                        "engine_cpu_us_per_row": round(1e6 * cpu / count, 2),
                        "unix_window": [round(ended - seconds, 2), round(ended, 2)],
                    }
                    out["cases"].append(case)
                    print(json.dumps(case), flush=True)
        for tokens in TOKENS:
            rounds = [c for c in out["cases"] if c["tokens_per_row"] == tokens]
            ratios = [
                on["rows_per_s"] / off["rows_per_s"]
                for on in rounds
                if on["overlapped"]
                for off in rounds
                if not off["overlapped"] and off["round"] == on["round"]
            ]
            out[f"overlapped_vs_serial_rows_per_s_{tokens}tok"] = round(statistics.median(ratios), 3)
            out[f"overlapped_vs_serial_least_cosine_{tokens}tok"] = least_cosine(
                vectors[tokens, True], vectors[tokens, False]
            )
        return out
    finally:
        backend.overlaps_steps = False
        await backend.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdir")
    parser.add_argument("out")
    parser.add_argument("--rows", type=int, default=200_000, help="rows of 50 tokens; a tenth as many of 512")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gpu-model", choices=("base", "tiny"), default="base")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--max-batch-tokens", type=int, default=16384)
    parser.add_argument("--memory-fraction", type=float, default=0.5)
    args = parser.parse_args()
    from embedtext.server.engine.vllm_stepped import use_inprocess_engine

    if args.device == "cpu":
        from embedtext.server.host.cpu_threads import cpu_engine_env

        os.environ.update(cpu_engine_env())
    use_inprocess_engine()
    from embedtext.bench.gpu_suite import gpu_model_dir
    from embedtext.bench.plan import GeneratedModels
    from embedtext.server.models.source import load_model_spec

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    spec = load_model_spec(str(gpu_model_dir(GeneratedModels(work), args.gpu_model)), name=args.gpu_model)
    result = asyncio.run(run(args, spec))
    import torch
    import vllm

    device = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu"
    result = {
        "command": " ".join(["python", *sys.argv]),
        "hardware": {"device": device, "vllm": vllm.__version__, "torch": torch.__version__, "cores": os.cpu_count()},
    } | result
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k != "cases"}), flush=True)
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    sys.exit(main())
