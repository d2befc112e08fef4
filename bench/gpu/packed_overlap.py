"""One packed engine in this process, in several ways side by side in rotating rounds: steps of the
server's default size or four times that, each launched while the last one computes (what an
unpaced engine on a GPU does) or one at a time. With ``--graphs`` the engine captures vLLM's
piecewise CUDA graphs at packed steps' sizes, and overlapped steps of either size replay them or
launch each kernel. For each way: rows/s, the engine thread's CPU a row, and the least cosine of its
vectors to the first way's. The GPU headline runs it first, and with ``--graphs`` later
(bench/gpu/headline.sh); on a CPU it rehearses the code path (there a launch computes, so nothing
overlaps, and no graphs are captured):

    python bench/gpu/packed_overlap.py WORKDIR OUT.json [--gpu-model base] [--rows 100000] [--rounds 2] [--device cuda]
    python bench/gpu/packed_overlap.py WORKDIR OUT.json --graphs   # CUDA graphs against launches
    python bench/gpu/packed_overlap.py --step-for-runs OUT.json    # the step size the later runs take

The model is the gpu suite's (``--gpu-model``), made in WORKDIR unless that already holds it.
Batches go as the server sends bulk work: 1,024 rows each, 4 in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from embedtext.bench.measure import named_thread_cpu_seconds
from embedtext.server.engine.base import ENGINE_THREAD_NAME, EngineSettings
from embedtext.server.rows import TokenRows

BATCH_ROWS = 1024
IN_FLIGHT = 4
TOKENS = (50, 512)
COMPARED_ROWS = 2048  # the rows whose vectors every way are compared
# Steps of the server's default size, and four times that: a forward's host time on a GPU was about
# the same a step at 50 and 512 tokens (bench/results/gpu-headline-h200-packed/), so larger steps
# spend less of it a row, and leave the device more to compute while the host prepares the next.
STEP_TOKENS = (16384, 65536)
# The headline's later runs take the larger steps only where, overlapped, they beat the default by
# more than rounds differ by at every row length, and every way's vectors agree.
WIN_MARGIN = 1.03
SAME_VECTORS = 0.99999
# The sizes the engine captures graphs at: a step pads to the next, so at most twice its tokens.
GRAPH_TOKENS = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)


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


def way_name(way: tuple) -> str:
    """``(16384, True, False)`` -> ``overlapped_steps16384``; ``_graphs`` where the step replays CUDA graphs."""
    step, overlap, graphed = way
    return f"{'overlapped' if overlap else 'serial'}_steps{step}{'_graphs' if graphed else ''}"


def probe_ways(graphs: bool) -> list[tuple[int, bool, bool]]:
    """The ways a probe compares, (step tokens, overlapped, CUDA graphs), its reference first:
    without graphs, both step sizes overlapped or not; with them, both sizes overlapped, replaying
    graphs or launching each kernel."""
    if graphs:
        return [(step, True, graphed) for step in STEP_TOKENS for graphed in (False, True)]
    return [(step, overlap, False) for step in STEP_TOKENS for overlap in (False, True)]


def probe_pairs(graphs: bool) -> dict[str, tuple[tuple, tuple]]:
    """The ratios a probe reports: name -> (numerator way, denominator way)."""
    small, large = STEP_TOKENS
    if graphs:
        return {f"graphs_vs_launches_steps{s}_overlapped": ((s, True, True), (s, True, False)) for s in STEP_TOKENS}
    return {
        f"overlapped_vs_serial_steps{small}": ((small, True, False), (small, False, False)),
        f"overlapped_vs_serial_steps{large}": ((large, True, False), (large, False, False)),
        f"steps{large}_vs_steps{small}_overlapped": ((large, True, False), (small, True, False)),
    }


async def run(args, spec) -> dict:
    from embedtext.server.engine.packed_backend import PackedVllmBackend

    settings = EngineSettings(
        memory_fraction=args.memory_fraction,
        max_batch_tokens=max(STEP_TOKENS),  # vLLM sizes its engine for the longest step
        max_num_seqs=1024,
        device=args.device,
        enforce_eager=args.device == "cpu",
        step_graph_tokens=GRAPH_TOKENS if args.graphs else (),
    )
    backend = PackedVllmBackend(spec, settings, name="overlap-probe")
    engine_cpu = functools.partial(named_thread_cpu_seconds, ENGINE_THREAD_NAME)
    started = time.perf_counter()
    await backend.start()
    out: dict = {"engine_start_s": round(time.perf_counter() - started, 1), "cases": []}
    try:
        packed = backend.packed
        if packed is None:
            return out | {"error": "the packed check failed: the engine fell back to vLLM's requests"}
        out["overlaps_by_default"] = backend.overlaps_steps
        if args.graphs and not packed.use_graphs:
            why = "the start-up check refused them" if packed.graphs else "none captured (a GPU's compiled engine does)"
            return out | {"error": f"no CUDA graphs to replay: {why}"}
        sets = {t: random_rows(args.rows if t == 50 else args.rows // 10, t, packed.vocab_size, seed=t) for t in TOKENS}
        ways = probe_ways(args.graphs)

        def use(way) -> None:
            backend._step_tokens, backend.overlaps_steps, packed.use_graphs = way

        for rows in sets.values():  # warm every way (compiles and allocations)
            for way in ways:
                use(way)
                await embed_all(backend, rows.slice(0, min(len(rows.lengths), BATCH_ROWS * IN_FLIGHT)))
        vectors: dict = {}
        for round_ in range(args.rounds):
            for tokens, rows in sets.items():
                for way in ways[round_ % len(ways) :] + ways[: round_ % len(ways)]:  # rotating
                    use(way)
                    cpu0, t0 = engine_cpu(), time.perf_counter()
                    got = await embed_all(backend, rows)
                    seconds, cpu, ended = time.perf_counter() - t0, engine_cpu() - cpu0, time.time()
                    if round_ == 0:
                        vectors[tokens, way] = got
                    count = len(rows.lengths)
                    step, overlap, graphed = way
                    case = {
                        "name": f"packed_{way_name(way)}_{tokens}tok_round{round_}",
                        "engine_loop": ("packed, overlapped" if overlap else "packed")
                        + (", CUDA graphs" if graphed else ""),
                        "tokens_per_row": tokens,
                        "step_tokens": step,
                        "overlapped": overlap,
                        "graphs": graphed,
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
            for key, (numerator, denominator) in probe_pairs(args.graphs).items():
                out[f"{key}_rows_per_s_{tokens}tok"] = median_ratio(out["cases"], tokens, numerator, denominator)
            reference = vectors[tokens, ways[0]]
            out[f"least_cosine_to_{way_name(ways[0])}_{tokens}tok"] = min(
                least_cosine(vectors[tokens, way], reference) for way in ways
            )
        return out
    finally:
        backend.overlaps_steps = False
        await backend.stop()


def median_ratio(cases: list[dict], tokens: int, numerator: tuple, denominator: tuple) -> float:
    """The median over rounds of one way's rows/s over another's (ways as (step tokens, overlapped,
    CUDA graphs))."""

    def rows_per_s(way, round_):
        (case,) = [
            c
            for c in cases
            if (c["step_tokens"], c["overlapped"], c["graphs"]) == way
            and c["tokens_per_row"] == tokens
            and c["round"] == round_
        ]
        return case["rows_per_s"]

    rounds = sorted({c["round"] for c in cases if c["tokens_per_row"] == tokens})
    return round(statistics.median(rows_per_s(numerator, r) / rows_per_s(denominator, r) for r in rounds), 3)


def step_tokens_for_runs(result: dict) -> int:
    """The step size for the headline's later runs: the larger where the probe says it wins
    (``WIN_MARGIN``, ``SAME_VECTORS``), else the server's default; a probe without its ratios
    (cut short, or failed) keeps the default."""
    small, large = STEP_TOKENS
    for tokens in TOKENS:
        ratio = result.get(f"steps{large}_vs_steps{small}_overlapped_rows_per_s_{tokens}tok")
        least = result.get(f"least_cosine_to_serial_steps{small}_{tokens}tok")
        if ratio is None or least is None or ratio < WIN_MARGIN or least < SAME_VECTORS:
            return small
    return large


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdir", nargs="?")
    parser.add_argument("out", nargs="?")
    parser.add_argument("--step-for-runs", metavar="RESULT", help="print the step size a result picks; run nothing")
    parser.add_argument("--rows", type=int, default=100_000, help="rows of 50 tokens; a tenth as many of 512")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--gpu-model", choices=("base", "tiny"), default="base")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--memory-fraction", type=float, default=0.5)
    parser.add_argument(
        "--graphs",
        action="store_true",
        help="capture vLLM's CUDA graphs at packed steps' sizes, and compare replaying them with launching each kernel",
    )
    args = parser.parse_args()
    if args.step_for_runs:
        print(step_tokens_for_runs(json.loads(Path(args.step_for_runs).read_text())))
        return 0
    if not (args.workdir and args.out):
        parser.error("WORKDIR and OUT are needed to run the probe")
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
