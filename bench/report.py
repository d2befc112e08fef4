"""The report of a bench run: targets checked against the ratios, a printed table, the JSON file."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

# ratio key (or key prefix ending in '_') -> (how it is judged, target)
TARGETS: dict[str, tuple[str, float | tuple[float, float]]] = {
    "udf_vs_inprocess": (">=", 0.95),
    "udf_vs_inprocess_512": (">=", 0.95),
    "udf_vs_http_json": (">=", 1.3),
    "index_vs_raw_udf": (">=", 0.9),
    "bytes_vs_repeated_float": (">=", 20.0),
    "wire_bytes_vs_repeated_float": (">=", 20.0),
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
    # On the default model the packed path must not lose rows/s (its compute dominates).
    "engine_overhead_rows_per_s_default_packed_vs_stepped": (">=", 1.0),
    "engine_overhead_rows_per_s_default_packed_vs_stepped_256": (">=", 1.0),
    # The DuckDB extension against the Python Arrow UDF (bench/extension.py), on 2 cores.
    "extension_vs_udf_null": (">=", 1.3),
    "extension_cpu_vs_udf_null": ("<=", 0.33),
    "extension_vs_udf_model": (">=", 1.0),
    "extension_vs_udf_model_512": (">=", 1.0),
    "gpu_tokens_per_s_50tok": (">=", 2.3e6),
    "gpu_tokens_per_s_512tok": (">=", 2.1e6),
    "gpu_udf_vs_http_json_50tok": (">=", 20.0),  # DuckDB embed_text against vLLM's HTTP/JSON server
}

# Width of the case and ratio name column: the longest ratio keys (cpu-peers' floor shares) fit.
NAME_WIDTH = 52

_CHECKS: dict[str, Callable[[float, object], bool]] = {
    ">=": lambda v, t: v >= t,
    "<=": lambda v, t: v <= t,
    "within": lambda v, t: t[0] <= v <= t[1],
}


def _target_for(key: str):
    if key in TARGETS:
        return TARGETS[key]
    for prefix, target in TARGETS.items():
        if prefix.endswith("_") and key.startswith(prefix):
            return target
    return None


def check_targets(ratios: dict[str, float]) -> dict[str, dict]:
    out = {}
    for key, value in ratios.items():
        found = _target_for(key)
        if found is None or value is None:
            continue
        op, target = found
        shown = list(target) if isinstance(target, tuple) else target
        out[key] = {"target": shown, "op": op, "value": value, "met": bool(_CHECKS[op](value, target))}
    return out


def _fmt(v, spec: str = ",.0f") -> str:
    return "-" if v is None else format(v, spec)


def format_table(cases: list[dict], ratios: dict[str, float], targets: dict[str, dict]) -> str:
    lines = [
        f"{'case':{NAME_WIDTH}} {'rows':>9} {'tok/row':>7} {'rows/s':>10} {'tokens/s':>11} {'p50 ms':>8} "
        f"{'p99 ms':>8} {'RSS MB':>7} {'srv MB':>7}"
    ]
    for c in cases:
        lines.append(
            f"{c['name']:{NAME_WIDTH}} {c['rows']:>9,} {_fmt(c['tokens_per_row'], 'g'):>7} {_fmt(c['rows_per_s']):>10} "
            f"{_fmt(c['tokens_per_s']):>11} {_fmt(c['p50_ms'], '.1f'):>8} {_fmt(c['p99_ms'], '.1f'):>8} "
            f"{_fmt(c['peak_rss_mb']):>7} {_fmt(c.get('server_peak_rss_mb')):>7}"
        )
    lines.append("")
    lines.append(f"{'ratio':{NAME_WIDTH}} {'value':>9} {'target':>14} {'':>7}")
    for key, value in ratios.items():
        t = targets.get(key)
        if t is None:
            lines.append(f"{key:{NAME_WIDTH}} {value:>9.3f}")
            continue
        shown = f"{t['target'][0]}..{t['target'][1]}" if t["op"] == "within" else f"{t['op']} {t['target']:g}"
        lines.append(f"{key:{NAME_WIDTH}} {value:>9.3f} {shown:>14} {'met' if t['met'] else 'MISSED':>7}")
    return "\n".join(lines)


def latency_table(cases: list[dict]) -> str:
    rows = [c for c in cases if c["suite"] == "latency" and "offered_load" in c]
    if not rows:
        return ""
    lines = [
        f"{'latency case':30} {'offered/s':>10} {'achieved/s':>10} {'p50 ms':>8} {'p99 ms':>9} "
        f"{'>200ms':>7} {'errors':>6} {'RES_EXH':>7}"
    ]
    for c in rows:
        lines.append(
            f"{c['name']:30} {c['offered_requests_per_s']:>10,.2f} {_fmt(c['achieved_requests_per_s'], ',.2f'):>10} "
            f"{_fmt(c['p50_ms'], '.1f'):>8} {_fmt(c['p99_ms'], '.1f'):>9} {_fmt(c['share_over_200ms'], '.1%'):>7} "
            f"{c['errors']:>6} {c['resource_exhausted']:>7}"
        )
    return "\n".join(lines)


def format_markdown(report: dict) -> str:
    """Markdown tables of a report (for docs/benchmarks.md)."""
    lines = [
        "| case | rows | tokens/row | rows/s | tokens/s | p50 ms | p99 ms | client RSS MB | server RSS MB |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c in report["cases"]:
        if "offered_load" in c:
            continue
        lines.append(
            f"| `{c['name']}` | {c['rows']:,} | {_fmt(c['tokens_per_row'], 'g')} | {_fmt(c['rows_per_s'])} | "
            f"{_fmt(c['tokens_per_s'])} | {_fmt(c['p50_ms'], '.1f')} | {_fmt(c['p99_ms'], '.1f')} | "
            f"{_fmt(c['peak_rss_mb'])} | {_fmt(c.get('server_peak_rss_mb'))} |"
        )
    lat = [c for c in report["cases"] if "offered_load" in c]
    if lat:
        lines += [
            "",
            "| latency case | offered req/s | achieved req/s | p50 ms | p99 ms | > 200 ms | errors "
            "| RESOURCE_EXHAUSTED |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for c in lat:
            lines.append(
                f"| `{c['name']}` | {c['offered_requests_per_s']:,.2f} | "
                f"{_fmt(c['achieved_requests_per_s'], ',.2f')} | "
                f"{_fmt(c['p50_ms'], '.1f')} | {_fmt(c['p99_ms'], '.1f')} | {_fmt(c['share_over_200ms'], '.1%')} | "
                f"{c['errors']} | {c['resource_exhausted']} |"
            )
    lines += ["", "| ratio | value | target | |", "| --- | ---: | ---: | --- |"]
    for key, value in report["ratios"].items():
        t = report["targets"].get(key)
        shown = (
            ""
            if t is None
            else (f"{t['target'][0]}..{t['target'][1]}" if t["op"] == "within" else f"{t['op']} {t['target']:g}")
        )
        verdict = "" if t is None else ("met" if t["met"] else "**missed**")
        lines.append(f"| `{key}` | {value:.3f} | {shown} | {verdict} |")
    return "\n".join(lines)


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
    """``python -m embedtext.bench.report merge OUT IN...``, ``show IN...`` or ``markdown IN...``."""
    import argparse

    from embedtext.bench.session import merge_reports, print_report

    parser = argparse.ArgumentParser(description="Merge or show bench reports.")
    parser.add_argument("action", choices=["merge", "show", "markdown"])
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args(argv)
    if args.action == "merge":
        report = merge_reports(args.paths[1:])
        write_json(args.paths[0], report)
    else:
        report = merge_reports(args.paths)
    if args.action == "markdown":
        print(format_markdown(report))
    else:
        print_report(report)


if __name__ == "__main__":
    main()
