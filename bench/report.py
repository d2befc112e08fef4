"""The report of a bench run: its cases, the ratios checked against their targets, tables, JSON."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence

from embedtext.bench.engine_overhead import OVERHEAD_FAMILIES, family_label

_FAMILIES = [family_label(f) for f in OVERHEAD_FAMILIES]
# ratio key (or key prefix ending in '_') -> (how it is judged, target)
TARGETS: dict[str, tuple[str, float | tuple[float, float]]] = {
    "udf_vs_inprocess": (">=", 0.95),
    "udf_vs_inprocess_512": (">=", 0.95),
    "udf_vs_http_json": (">=", 1.3),
    "bytes_vs_repeated_float": (">=", 20.0),
    "scaling_rows_per_s_": ("within", (0.9, 1.1)),  # flat within 10%
    "scaling_peak_rss_": ("<=", 1.1),  # flat memory (less is fine)
    "mixed_interactive_p99_vs_slo_": ("<=", 1.0),  # p99 over the target: 250 ms on a CPU, 20 on a GPU
    "mixed_bulk_rows_per_s": (">=", 0.95),
    "mixed_bulk_rows_per_s_alone": (">=", 0.95),
    "mixed_two_scans_ratio": ("<=", 1.25),
    "mixed_flood_errors": ("<=", 0),
    # The cpu suite's peers on all-MiniLM-L6-v2 at 50 tokens, 2 cores, same dtype.
    "udf_vs_sentence_transformers": (">=", 2.0),
    "udf_vs_onnxruntime": (">=", 1.5),
    "startup_ready_s": ("<=", 30.0),  # a warm start on 2 cores
    # A row's host budget on the overhead model at 50 tokens, 2 cores: enough for one engine to feed
    # 30,000 rows/s on a GPU host (bench/engine_overhead.py).
    "engine_overhead_engine_cpu_us_overhead_packed": ("<=", 30.0),
    "engine_overhead_server_cpu_us_overhead_packed": ("<=", 25.0),
    # The same budget for the engine's CPU besides the model's forward: on a small CPU the overhead
    # model's own compute is most of the line above (docs/benchmarks.md).
    "engine_overhead_path_cpu_us_overhead_packed": ("<=", 30.0),
    # On the default model the packed path must not lose rows/s (its compute dominates).
    "engine_overhead_rows_per_s_default_packed_vs_stepped": (">=", 1.0),
    "engine_overhead_rows_per_s_default_packed_vs_stepped_256": (">=", 1.0),
    # Each other model family's small model at 50 tokens (bench/engine_overhead.py): packed steps
    # against vLLM's request per row, the engine's work besides the model, the server's a row.
    **{f"engine_overhead_rows_per_s_{f}_packed_vs_stepped": (">=", 2.0) for f in _FAMILIES},
    **{f"engine_overhead_path_cpu_us_{f}_packed": ("<=", 10.0) for f in _FAMILIES},
    **{f"engine_overhead_server_cpu_us_{f}_packed": ("<=", 25.0) for f in _FAMILIES},
    # The DuckDB extension against the Python Arrow UDF (bench/extension.py), on 2 cores.
    "extension_vs_udf_null": (">=", 1.3),
    "extension_cpu_vs_udf_null": ("<=", 0.33),
    "extension_vs_udf_model": (">=", 1.0),
    "extension_vs_udf_model_512": (">=", 1.0),
    "gpu_tokens_per_s_50tok": (">=", 2.3e6),
    "gpu_tokens_per_s_512tok": (">=", 2.1e6),
    "gpu_udf_vs_http_json_50tok": (">=", 20.0),  # DuckDB embed_text against vLLM's HTTP/JSON server
}

# Suites whose variants set the compile setting themselves: the run's is not theirs.
OWN_SETTING = {"compile", "startup"}

NAME_WIDTH = 52  # the case and ratio name column: the longest ratio keys fit

_CHECKS: dict[str, Callable[[float, object], bool]] = {
    ">=": lambda v, t: v >= t,
    "<=": lambda v, t: v <= t,
    "within": lambda v, t: t[0] <= v <= t[1],
}
# Each table's columns: (heading, width in the printed table, the row's field, its format).
CASE_COLUMNS = (
    ("case", NAME_WIDTH, "name", ""),
    ("rows", 9, "rows", ","),
    ("tok/row", 7, "tokens_per_row", "g"),
    ("rows/s", 10, "rows_per_s", ",.0f"),
    ("tokens/s", 11, "tokens_per_s", ",.0f"),
    ("p50 ms", 8, "p50_ms", ".1f"),
    ("p99 ms", 8, "p99_ms", ".1f"),
    ("RSS MB", 7, "peak_rss_mb", ",.0f"),
    ("srv MB", 7, "server_peak_rss_mb", ",.0f"),
)
RATIO_COLUMNS = (("ratio", NAME_WIDTH, "name", ""), ("value", 9, "value", ".3f"), ("target", 14, "target", ""))


def check_targets(ratios: dict[str, float]) -> dict[str, dict]:
    out = {}
    for key, value in ratios.items():
        found = TARGETS.get(key) or next((t for p, t in TARGETS.items() if p[-1] == "_" and key.startswith(p)), None)
        if found is None or value is None:
            continue
        op, target = found
        shown = list(target) if isinstance(target, tuple) else target
        out[key] = {"target": shown, "op": op, "value": value, "met": bool(_CHECKS[op](value, target))}
    return out


def all_ratios(cases: list[dict]) -> dict[str, float]:
    """Every ratio of ``cases``: the declared ones they carry (bench/rounds.py), and those of the
    suites that compute their own from several cases (suites absent from ``cases`` give none)."""
    from embedtext.bench.engine_overhead import engine_overhead_ratios
    from embedtext.bench.gpu_suite import gpu_ratios
    from embedtext.bench.mixed import mixed_ratios
    from embedtext.bench.rounds import declared_ratios
    from embedtext.bench.scaling import scaling_ratios
    from embedtext.bench.startup import startup_ratios

    computed = (scaling_ratios, mixed_ratios, startup_ratios, gpu_ratios, engine_overhead_ratios)
    return {**declared_ratios(cases), **{k: v for ratios in computed for k, v in ratios(cases).items()}}


def _with_ratios(fields: dict, cases: list[dict], unfinished: str | None) -> dict:
    ratios = all_ratios(cases)
    report = {**fields, "cases": cases, "ratios": ratios, "targets": check_targets(ratios)}
    return report | ({"unfinished": unfinished} if unfinished else {})


def make_report(cases: list[dict], *, plan, suites: Sequence[str], command: str, started: float, unfinished=None):
    """A run's report: its cases, their ratios and the targets. ``unfinished``: the suite still
    running when a partial report was written (a run cut short leaves that one)."""
    from embedtext.bench.hardware import hardware_info

    own_setting = sorted(OWN_SETTING & {*suites})
    fields = {
        "hardware": hardware_info(),
        "command": command,
        "quick": plan.quick,
        "suites": list(suites),
        "engines": plan.engines + "".join(f"; the {s} suite sets its own per variant" for s in own_setting),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "seconds": round(time.time() - started, 1),
    }
    return _with_ratios(fields, cases, unfinished)


def merge_reports(paths: Sequence[str]) -> dict:
    """One report from several runs' JSON (the GPU suite runs one replica count per command)."""
    reports = [json.loads(open(p).read()) for p in paths]
    fields = {
        "hardware": reports[0]["hardware"],
        "command": " + ".join(r["command"] for r in reports),
        "quick": any(r.get("quick") for r in reports),
        "suites": sorted({s for r in reports for s in r.get("suites", [])}),
        "seconds": sum(r.get("seconds") or 0 for r in reports),
    }
    unfinished = ", ".join(sorted({r["unfinished"] for r in reports if r.get("unfinished")}))
    return _with_ratios(fields, [c for r in reports for c in r["cases"]], unfinished)


def _table(columns, rows: list[dict]) -> list[str]:
    def cell(value, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    lines = [" ".join(f"{h:{'<' if i == 0 else '>'}{w}}" for i, (h, w, *_) in enumerate(columns))]
    for row in rows:
        cells = (f"{cell(row.get(f), s):{'<' if i == 0 else '>'}{w}}" for i, (_, w, f, s) in enumerate(columns))
        lines.append(" ".join(cells))
    return lines


def format_report(report: dict) -> str:
    """The report's tables: cases, and ratios with their targets."""
    ratios = []
    for key, value in report["ratios"].items():
        t = report["targets"].get(key)
        shown = verdict = None
        if t is not None:
            shown = f"{t['target'][0]}..{t['target'][1]}" if t["op"] == "within" else f"{t['op']} {t['target']:g}"
            verdict = "met" if t["met"] else "MISSED"
        ratios.append({"name": key, "value": value, "target": shown, "verdict": verdict})
    tables = [_table(CASE_COLUMNS, report["cases"])]
    tables.append(_table((*RATIO_COLUMNS, ("", 7, "verdict", "")), ratios))
    return "\n\n".join("\n".join(table) for table in tables)


def print_report(report: dict) -> None:
    from embedtext.bench.hardware import hardware_line

    print(f"\nhardware: {hardware_line(report['hardware'])}")
    print(f"command: {report['command']}  ({report.get('seconds') or 0:.0f} s)")
    if report.get("unfinished"):
        print(f"UNFINISHED: cut short in the {report['unfinished']} suite; its cases are the phases it finished")
    print("\n" + format_report(report))


# An absolute path's folders (not a URL's): what names the machine a result was made on.
_MACHINE_FOLDERS = re.compile(r"(?<![\w.:/])/(?:[\w.+-]+/)+")


def without_machine_paths(value):
    """``value`` with the folders of absolute paths cut from every string (file names kept).

    >>> without_machine_paths({"a": ["tcmalloc (/usr/lib/x/libtcmalloc.so.4)", "http://h:1/v1/e", "bench/x.json"]})
    {'a': ['tcmalloc (libtcmalloc.so.4)', 'http://h:1/v1/e', 'bench/x.json']}
    """
    if isinstance(value, str):
        return _MACHINE_FOLDERS.sub("", value)
    if isinstance(value, dict):
        return {k: without_machine_paths(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_machine_paths(v) for v in value]
    return value


def write_json(path: str, report: dict) -> None:
    """Write a report; results are committed, so no path of this machine goes into them."""
    with open(path, "w") as fh:
        json.dump(without_machine_paths(report), fh, indent=1)
        fh.write("\n")


def main(argv: list[str] | None = None) -> None:
    """``python -m embedtext.bench.report merge OUT IN...`` or ``show IN...``."""
    import argparse

    parser = argparse.ArgumentParser(description="Merge or show bench reports.")
    parser.add_argument("action", choices=["merge", "show"])
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args(argv)
    if args.action == "merge":
        report = merge_reports(args.paths[1:])
        write_json(args.paths[0], report)
    else:
        report = merge_reports(args.paths)
    print_report(report)


if __name__ == "__main__":
    main()
