"""Where a server's time goes while queries meet bulk work: py-spy samples the server process and
each replica's worker during the mixed suite's phases, and a summary names the frames per thread.

    ~/gpu-venv/bin/python bench/gpu/profile_server.py --out ~/gpu-results/profile   # ~2 minutes

One server with the defaults (on a GPU: an interactive replica beside the bulk engine, compiled),
all-MiniLM-L6-v2; one untimed bulk call; then two phases, each sampled from start to end:
``idle`` (the mixed suite's probes alone: one 12-token query every 50 ms) and ``bulk`` (the probes
while 4 clients each send 2048-row calls in a loop). Per phase and process it writes py-spy's raw
stacks (``{phase}-{process}.raw``: the server, each worker, the prober and the bulk clients; every
thread, idle time included, so waits show) and
``summary.txt``: the probes' p50/p99 split by their replies (queue, engine, rest), the engine part
split by the server's step timeline (``steps.jsonl``, ``--set step_timeline``: the step a query waited
for, its own step, the hand-back to the worker's event loop), and per thread the frames holding
the most samples. Arguments after ``--`` go to ``embedtext serve``.

py-spy (a sampling profiler; reading another process's memory needs root or ptrace rights) is
not in the GPU kit: install its wheel into the venv first (bench/GPU.md).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from embedtext.bench.bulk_loads import BULK_ROWS, probed_load, warm_up
from embedtext.bench.corpus import BenchCorpus
from embedtext.bench.measure import percentiles_ms, process_names
from embedtext.bench.phase_report import loop_late, loop_late_text
from embedtext.bench.probes import PROBE_PARTS, Prober, probe_figures, probe_parts_ms
from embedtext.bench.servers import embedtext_server
from embedtext.bench.step_timeline import read_timeline, timeline_parts
from embedtext.server.engine.base import WORKER_NAME
from embedtext.server.models.source import load_model_spec

SAMPLES_A_SECOND = 200


def timeline_line(phase: str, batches: int, parts: dict[str, tuple[float, float]]) -> str:
    """The summary's line for one phase's engine part (p50 / p99)."""
    if not batches:
        return f"{phase}: in the engine, no step timeline (a stepped engine writes it)"
    say = {
        "waited_ms": "the running step",
        "step_ms": "own step",
        "step_rows": "its rows",
        "step_bulk_rows": "bulk rows in it",
        "to_loop_ms": "back to the event loop",
        "worker_ms": "in the worker",
        "gc_ms": "garbage collection",
    }
    figures = "; ".join(f"{say[part]} {p50:g} / {p99:g}" for part, (p50, p99) in parts.items())
    return f"{phase}: in the engine ({batches} batches, ms and rows, p50 / p99): {figures}"


def top_frames(raw: Path, top: int = 20) -> dict[str, dict[str, list[tuple[float, str]]]]:
    """Per thread of a py-spy raw file (``thread;frame;...;frame count`` lines), busiest first:
    ``inside``, the frames with the largest share of the thread's samples (each counted once a
    stack; those in nearly every sample, the thread's own entry, left out), and ``leaves``, where
    the samples ended. With idle time sampled too, a thread's share is of its whole time."""
    samples: collections.Counter = collections.Counter()
    inside: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    leaves: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        thread, *where = stack.split(";")
        frames = [f.split(" (")[0] for f in where]  # "name (file:line)": by name
        samples[thread] += int(count)
        for frame in set(frames):
            inside[thread][frame] += int(count)
        if frames:
            leaves[thread][frames[-1]] += int(count)

    def shares(counts: collections.Counter, total: int, most: float) -> list[tuple[float, str]]:
        ranked = [(round(100 * n / total, 1), frame) for frame, n in counts.most_common()]
        return [(share, frame) for share, frame in ranked if 0.5 <= share < most][:top]

    return {
        thread: {"inside": shares(inside[thread], n, 99.5), "leaves": shares(leaves[thread], n, 100.1)}
        for thread, n in samples.most_common()
    }


def _sample(py_spy: str, pid: int, seconds: float, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [py_spy, "record", "-p", str(pid), "-d", str(max(1, round(seconds))), "-r", str(SAMPLES_A_SECOND)]
        + ["-f", "raw", "-o", str(out), "--threads", "--idle", "--nonblocking"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _profiled(py_spy: str, server, phase: str, seconds: float, run, out: Path, prober) -> dict:
    """``run()`` (a coroutine's result: the probes' times) with py-spy on the server and its workers,
    the prober's process and this one (the bulk clients): a probe's time outside the server is
    spent in the last two, in gRPC's threads or in the server's before its handler starts."""
    names = {server.pid: "server"} | {
        pid: f"worker{i}" for i, pid in enumerate(p for p, n in process_names(server.pid).items() if n == WORKER_NAME)
    }
    names |= {prober.pid: "prober", os.getpid(): "clients"}
    samplers = {name: _sample(py_spy, pid, seconds, out / f"{phase}-{name}.raw") for pid, name in names.items()}
    times = asyncio.run(run())
    for name, sampler in samplers.items():
        _, err = sampler.communicate(timeout=seconds + 60)
        if sampler.returncode:
            print(f"py-spy on {name} failed: {err.strip()[-300:]}", file=sys.stderr)
    return probe_figures(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=20.0, help="of the bulk phase (idle: a third)")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--py-spy", default=None, help="default: beside this python, else on PATH")
    parser.add_argument("serve_args", nargs="*", help="after --: more `embedtext serve` arguments")
    args = parser.parse_args(argv)
    py_spy = args.py_spy or str(Path(sys.executable).with_name("py-spy"))
    if not Path(py_spy).exists():
        py_spy = shutil.which("py-spy") or ""
    if not py_spy:
        parser.error("py-spy not found: install its wheel into this venv (bench/GPU.md)")
    args.out.mkdir(parents=True, exist_ok=True)
    corpus = BenchCorpus(load_model_spec("default").path)
    bulk, probes = corpus.texts(BULK_ROWS, 50), corpus.texts(200, 12, seed=2)
    phases = {"idle": (0, args.seconds / 3), "bulk": (args.clients, args.seconds)}
    report = []
    steps = args.out / "steps.jsonl"
    steps.unlink(missing_ok=True)  # the server appends to it
    serving = embedtext_server(["default"], args=[*args.serve_args, "--set", f"step_timeline={steps}"])
    with serving as server, Prober() as prober:
        asyncio.run(warm_up(server.target, bulk))
        prober.warm_up(server.target, probes)
        for phase, (clients, seconds) in phases.items():
            started, since = time.monotonic(), time.time()

            async def run(clients=clients, seconds=seconds):
                times, _rows, _elapsed = await probed_load(server.target, bulk, probes, clients, seconds, prober)
                return times

            got = _profiled(py_spy, server, phase, seconds, run, args.out, prober)
            p50, p99 = percentiles_ms(got["latencies"])
            took = time.monotonic() - started
            line = f"{phase}: {len(got['latencies'])} probes in {took:.0f}s, p50 {p50} ms, p99 {p99} ms"
            parts = probe_parts_ms(got)
            for part in PROBE_PARTS:
                if f"{part}_p50_ms" in parts:
                    line += f"; {part} {parts[f'{part}_p50_ms']} / {parts[f'{part}_p99_ms']}"
            late = loop_late(server.target)
            if late:
                line += "; " + loop_late_text(late["loop_late_p99_ms"][0], late["loop_late_max_ms"][0])
            print(line, flush=True)
            report.append(line)
            line = timeline_line(phase, *timeline_parts(read_timeline(steps, since, time.time())))
            print(line, flush=True)
            report.append(line)
    for raw in sorted(args.out.glob("*.raw")):
        report.append(f"\n== {raw.name}")
        for thread, frames in top_frames(raw).items():
            report.append(f"-- {thread}")
            report += [f"  {share:5.1f}% {frame}" for share, frame in frames["inside"]]
            report.append("   ended in: " + ", ".join(f"{frame} {share}%" for share, frame in frames["leaves"][:8]))
    (args.out / "summary.txt").write_text("\n".join(report) + "\n")
    print(f"wrote {args.out / 'summary.txt'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
