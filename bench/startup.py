"""startup suite: how long a server takes to become ready on a warm machine, and until every engine
is up: each variant started in turn, in rotating rounds, after one untimed start that fills the
compile cache.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

SUITE = "startup"
SCAN_TOKENS = 50
# name -> server flags
VARIANTS: dict[str, tuple[str, ...]] = {
    "default": (),
    "eager": ("--set", "enforce_eager=on"),
    "compiled": ("--set", "enforce_eager=off"),
    "shared": ("--set", "interactive_replica=off"),
}

# The server's own line once the engines after the first, started behind "ready", are up.
_EVERY_ENGINE = re.compile(r"every engine is up \(\d+\), ([\d.]+) s after ready")


def startup_ratios(cases: Sequence[dict]) -> dict[str, float]:
    """The default's warm ready time, and how the other variants compare (medians over rounds)."""
    by_variant = {c["path_label"]: c for c in cases if c["suite"] == SUITE}
    if "default" not in by_variant:
        return {}
    default = by_variant["default"]
    out = {"startup_ready_s": default["ready_s"]}
    if default.get("every_engine_s"):
        out["startup_every_engine_s"] = default["every_engine_s"]
    for other, case in by_variant.items():
        if other != "default":
            out[f"startup_ready_s_{other}"] = case["ready_s"]
            out[f"startup_rows_per_s_vs_{other}"] = round(default["rows_per_s"] / case["rows_per_s"], 3)
    return out


def _median_start(runs: list[dict]) -> dict:
    """The rounds' starts as one: the median ready time's start, at the median scan seconds."""
    median = sorted(runs, key=lambda r: r["ready_s"])[len(runs) // 2]
    scans = sorted(r["seconds"] for r in runs)
    return {**median, "seconds": scans[len(scans) // 2], "ready_s_by_round": [r["ready_s"] for r in runs]}


def _start_once(model: str, variant: str, texts: list[str], *, cold: bool, progress) -> dict:
    import duckdb

    import embedtext
    from embedtext.bench.queries import load_docs
    from embedtext.connectors.local_server import LocalServer

    server = LocalServer([model], args=["--log-level", "INFO", *VARIANTS[variant]])
    launched = time.time()
    server.start()
    try:
        server.wait_ready(900)
        ready_s = time.time() - launched
        with duckdb.connect() as con:
            embedtext.register(con, server.target)
            load_docs(con, texts)
            con.execute("SELECT sum(embed_text(body)[1]) FROM (SELECT body FROM docs LIMIT 128)").fetchall()
            started = time.perf_counter()
            con.execute("SELECT sum(embed_text(body)[1]) FROM docs").fetchall()
            seconds = time.perf_counter() - started
        server.wait_ready(900, every_engine=True)  # a CPU's engines after the first start behind "ready"
        log = server.log_path.read_text(errors="replace")
    finally:
        server.stop()
    later = _EVERY_ENGINE.search(log)
    every_engine_s = round(ready_s + float(later.group(1)), 1) if later else None
    progress(
        f"startup: {variant}{' (untimed, fills the cache)' if cold else ''}: ready in {ready_s:.1f} s, "
        f"every engine up in {every_engine_s or ready_s:.1f} s; {len(texts) / seconds:,.0f} rows/s"
    )
    return {"seconds": seconds, "rows": len(texts), "ready_s": round(ready_s, 1), "every_engine_s": every_engine_s}


def run_startup(corpus, *, rounds: int, scan_rows: int, model: str = "default", progress=print) -> list[dict]:
    """Every variant started once untimed (its first round's warm-up), then once per round in
    rotating order (bench/rounds.py)."""
    from embedtext.bench.rounds import RoundsPath, Workload, run_rounds

    texts = corpus.texts(scan_rows, SCAN_TOKENS)

    def path(variant: str) -> RoundsPath:
        def measure(workload: Workload, warmup: bool) -> dict:
            if warmup:
                _start_once(model, variant, texts, cold=True, progress=progress)
            return _start_once(model, variant, texts, cold=False, progress=progress)

        return RoundsPath(variant, f"startup_{variant}", " ".join(VARIANTS[variant]) or "defaults", measure)

    workload = Workload(SCAN_TOKENS, scan_rows, kind="startup", name="start")
    return run_rounds(
        [path(v) for v in VARIANTS], [workload], suite=SUITE, rounds=rounds, combine=_median_start, progress=progress
    )
