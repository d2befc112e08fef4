"""What limited each case of a GPU run: the GPU's utilisation and each role's host cores during it.

    python bench/gpu/summarize.py OUT      # OUT as bench/gpu/headline.sh left it

Reads the suite's JSON reports (each case's ``unix_window``), ``gpu-util.csv`` (nvidia-smi) and
``host-cpu.jsonl`` (bench/gpu/sample_cpu.py); prints a table and writes ``OUT/summary.json``.
Each case gets a ``limit``, the first that holds of: the GPU busy 95% of the time or more
("gpu"); a role's busiest thread at 0.9 of a core or more ("engine thread", "server thread": a
serial loop); an engine process at 0.95 or more where threads were not sampled ("engine process");
under half a core idle on the host ("host cores"); else "none saturated" (waiting on one another).
"""

from __future__ import annotations

import argparse
import csv
import json
import operator
import statistics
import sys
from datetime import datetime
from pathlib import Path


def gpu_samples(path: Path) -> list[tuple[float, float, float]]:
    """(unix time, utilisation %, power W) of each nvidia-smi line."""
    rows = []
    if not path.exists():
        return rows
    with path.open() as f:
        for line in csv.reader(f, skipinitialspace=True):
            try:  # nvidia-smi writes the host's local time, as time.time() reads it on the same host
                when = datetime.strptime(line[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                rows.append((when, float(line[1].rstrip(" %")), float(line[4].rstrip(" W"))))
            except (ValueError, IndexError):
                continue  # the header, or a line cut short
    return rows


def host_samples(path: Path) -> list[tuple[float, dict[str, float], dict[str, float], dict[str, float]]]:
    """(unix time, {"<role> <pid>": cores}, {... its busiest thread}, {... its main thread}) of each line."""
    if not path.exists():
        return []
    lines = (json.loads(line) for line in path.read_text().splitlines() if line.startswith("{"))
    return [
        (line["unix"], line["cores"], line.get("thread", {}), line.get("main", {})) for line in lines if "unix" in line
    ]


def _role(key: str) -> str:
    head, _, pid = key.rpartition(" ")
    return head if pid.isdigit() else key  # "host idle" has no pid


def case_summary(case: dict, gpu: list, host: list) -> dict:
    """Means over the samples inside the case's window: GPU %, power, cores by role, busiest engine."""
    start, end = case["unix_window"]
    inside_gpu = [(u, w) for t, u, w in gpu if start <= t <= end]
    by_role: dict[str, list[float]] = {}
    threads_by_role: dict[str, list[float]] = {}
    main_by_role: dict[str, list[float]] = {}
    busiest_engine: list[float] = []
    inside_host = [(cores, threads, main) for t, cores, threads, main in host if start < t <= end]
    for cores, threads, main in inside_host:
        for sums, values, add in (
            (by_role, cores, operator.add),
            (threads_by_role, threads, max),
            (main_by_role, main, max),
        ):
            per_role: dict[str, float] = {}
            for key, value in values.items():
                role = _role(key)
                per_role[role] = add(per_role.get(role, 0.0), value)
            for role, value in per_role.items():
                sums.setdefault(role, []).append(value)
        engines = [v for k, v in cores.items() if k.startswith(("engine ", "vllm-engine "))]
        busiest_engine.append(max(engines, default=0.0))

    def mean(values) -> float | None:
        return round(statistics.fmean(values), 2) if values else None

    def per_sample(values_by_role: dict[str, list[float]]) -> dict[str, float]:
        # averaged over every sample, a role absent from one counting 0 there
        return {r: round(sum(v) / len(inside_host), 2) for r, v in sorted(values_by_role.items())}

    return {
        "name": case["name"],
        "tokens_per_s": case.get("tokens_per_s"),
        # what the engines ran, as the servers said (a packed engine whose check failed steps)
        "engine_loop": case.get("engine_loop"),
        # the engines' threads inside the model's forward (launching its kernels), from the servers' Info
        "model_cpu_us_per_row": case.get("model_cpu_us_per_row"),
        "gpu_util_pct": mean([u for u, _ in inside_gpu]),
        "gpu_power_w": mean([w for _, w in inside_gpu]),
        "host_cores": per_sample(by_role),
        "busiest_engine_cores": mean(busiest_engine),
        # per role, its busiest thread (near 1.0: a serial loop caps that role)
        "busiest_thread": per_sample(threads_by_role),
        "main_thread": per_sample(main_by_role),
        "samples": len(inside_host),
    }


GPU_BOUND_PCT = 95.0
THREAD_BOUND = 0.9
PROCESS_BOUND = 0.95
HOST_IDLE_BOUND = 0.5


def limit(summary: dict) -> str:
    """What bound a case, by the rules in this module's docstring."""
    if (summary["gpu_util_pct"] or 0.0) >= GPU_BOUND_PCT:
        return "gpu"
    threads = [f"{role} thread" for role, v in summary["busiest_thread"].items() if v >= THREAD_BOUND]
    if threads:
        return ", ".join(threads)
    if not summary["busiest_thread"] and (summary["busiest_engine_cores"] or 0.0) >= PROCESS_BOUND:
        return "engine process"
    if summary["host_cores"].get("host idle", HOST_IDLE_BOUND) < HOST_IDLE_BOUND:
        return "host cores"
    return "none saturated"


def summarize(out: Path) -> list[dict]:
    gpu = gpu_samples(out / "gpu-util.csv")
    host = host_samples(out / "host-cpu.jsonl")
    summaries = []
    for report in sorted(out.glob("*.json")):
        if report.name == "summary.json":
            continue
        try:
            cases = json.loads(report.read_text()).get("cases", [])
        except (json.JSONDecodeError, AttributeError):
            continue  # matmul.json and the like
        # the file names the run (a case's name does not say it ran under MPS, say)
        for case in cases:
            if case.get("unix_window"):
                summary = case_summary(case, gpu, host) | {"run": report.stem}
                summaries.append(summary | {"limit": limit(summary)})
    (out / "summary.json").write_text(json.dumps(summaries, indent=1) + "\n")
    return summaries


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    summaries = summarize(parser.parse_args().out)
    for s in summaries:
        cores = ", ".join(f"{role} {value}" for role, value in s["host_cores"].items())
        print(
            f"{s['run']:<28} {s['name']:<40} {s['tokens_per_s'] or 0:>12,.0f} tok/s  limit: {s['limit']}  "
            f"engines {s['engine_loop']}  "
            f"model forward {s['model_cpu_us_per_row']} us/row  "
            f"GPU {s['gpu_util_pct']}%  "
            f"busiest engine {s['busiest_engine_cores']} cores  [{cores}]  busiest thread {s['busiest_thread']}"
            f"  main thread {s['main_thread']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
