"""startup suite: how long a server takes to become ready on a warm machine, and where the time goes:
each variant started in turn, in rotating rounds, after one untimed start that fills the compile cache.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from datetime import datetime

SUITE = "startup"
SCAN_TOKENS = 50
# name -> server flags
VARIANTS: dict[str, tuple[str, ...]] = {
    "default": (),
    "eager": ("--set", "enforce_eager=on"),
    "compiled": ("--set", "enforce_eager=off"),
    "shared": ("--set", "interactive_replica=off"),
}

_OURS = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")
_VLLM = re.compile(r"^\((\w+)(?:-\d+)? pid=\d+\) \w+ (\d\d-\d\d \d\d:\d\d:\d\d) ")
_TOOK = {
    "weights_s": re.compile(r"Loading weights took ([\d.]+) seconds"),
    "init_engine_s": re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s"),
}


def startup_phases(log: str, launched: float) -> dict[str, float]:
    """Seconds of each phase of one start, from the server's log (ours and vLLM's lines).

    ``launch_to_engine_start_s``: the server process, its imports and models. Then, for AsyncLLM,
    ``engine_core_s``: vLLM imported in the server, and its engine-core process spawned and
    importing vLLM again; ``worker_s``: the same for the worker process it spawns (vLLM-CPU always
    spawns). For a stepped engine, ``import_s``: the replica's worker process importing vLLM.
    ``model_s``: weights, compile (or the cache) and warm-up, until the server says ready. vLLM's own
    timings of parts of the last phase come as ``weights_s`` and ``init_engine_s`` (the first
    engine's). ``every_engine_s``: from the launch until every engine is up (on a CPU the engines
    after the first start behind the ready server).

    >>> log = '''2026-11-25 08:29:26,448 INFO embedtext.server.engine.vllm_backend: starting m/0 for model m on cpu
    ... (EngineCore pid=7) INFO 11-25 08:29:58 [core.py:133] Initializing a V1 LLM engine
    ... (Worker pid=9) INFO 11-25 08:30:16 [default_loader.py:501] Loading weights took 0.04 seconds
    ... (EngineCore pid=7) INFO 11-25 08:30:23 [core.py:402] init engine (profile, create kv cache, warmup model) took 3.89 s
    ... 2026-11-25 08:30:24,464 INFO embedtext.server.engine.vllm_backend: m/0 ready (engine core pids [7])'''
    >>> launched = datetime(2026, 11, 25, 8, 29, 23, 448000).timestamp()
    >>> startup_phases(log, launched)
    {'launch_to_engine_start_s': 3.0, 'engine_core_s': 31.6, 'worker_s': 18.0, 'model_s': 8.5, 'weights_s': 0.04, 'init_engine_s': 3.89}
    >>> log = '''2026-11-25 11:11:42,027 INFO embedtext.server.engine.process_backend: starting m/0 for model m in a worker process
    ... 2026-11-25 11:11:58,504 INFO embedtext.server.engine.vllm_stepped[7272]: starting m/0 for model m on cpu, stepped in this process
    ... 2026-11-25 11:12:08,514 INFO embedtext.server.engine.process_backend: m/0 ready (worker pid 7272, engine pids [])
    ... 2026-11-25 11:12:08,600 INFO embedtext.server.scheduler.replicas: model m: starting replica 1 (bulk work) after the server is ready
    ... 2026-11-25 11:12:26,100 INFO embedtext.server.engine.vllm_stepped[7301]: starting m/1 for model m on cpu, stepped in this process
    ... 2026-11-25 11:12:37,200 INFO embedtext.server.engine.process_backend: m/1 ready (worker pid 7301, engine pids [])
    ... 2026-11-25 11:12:37,210 INFO embedtext.server: every engine is up (2), 28.7 s after ready'''
    >>> startup_phases(log, datetime(2026, 11, 25, 11, 11, 38, 527000).timestamp())
    {'launch_to_engine_start_s': 3.5, 'import_s': 16.5, 'model_s': 10.0, 'every_engine_s': 58.7}
    """  # noqa: E501 - doctest lines are compared whole
    year = datetime.fromtimestamp(launched).year
    marks: dict[str, float] = {}
    took: dict[str, float] = {}
    for line in log.splitlines():
        if m := _OURS.match(line):
            at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(m.group(2)) / 1000
            if " starting " in line and "stepped in this process" in line:
                marks.setdefault("stepped", at)  # the first engine's: later ones start after ready
            elif " starting " in line and "engine" not in marks:
                marks["engine"] = at
            elif " ready (engine core pids" in line or " ready (worker pid" in line:
                marks.setdefault("ready", at)  # the first engine's: the server is ready with it
            elif " every engine is up " in line:
                marks["every_engine"] = at
        elif m := _VLLM.match(line):
            at = datetime.strptime(f"{year}-{m.group(2)}", "%Y-%m-%d %H:%M:%S").timestamp()
            process = "core" if m.group(1) == "EngineCore" else "worker" if "Worker" in m.group(1) else None
            if process:
                marks.setdefault(process, at)
        for key, pattern in _TOOK.items():
            if found := pattern.search(line):
                took[key] = float(found.group(1))
    if "stepped" in marks:
        order = [
            ("launch_to_engine_start_s", "launched", "engine"),
            ("import_s", "engine", "stepped"),
            ("model_s", "stepped", "ready"),
        ]
    else:
        order = [
            ("launch_to_engine_start_s", "launched", "engine"),
            ("engine_core_s", "engine", "core"),
            ("worker_s", "core", "worker"),
            ("model_s", "worker", "ready"),
        ]
    marks["launched"] = launched
    # On a CPU the engines after the first start behind the ready server (server/scheduler/replicas.py).
    order.append(("every_engine_s", "launched", "every_engine"))
    phases = {
        name: round(marks[end] - marks[start], 1) for name, start, end in order if start in marks and end in marks
    }
    return {**phases, **took}


def startup_ratios(cases: Sequence[dict]) -> dict[str, float]:
    """The default's warm ready time, and how the other variants compare (medians over rounds)."""
    # Reports from before the suite ran on the rounds runner hold a case a start (``variant``):
    # their last warm start stands for each variant.
    by_variant = {c.get("path_label") or c["variant"]: c for c in cases if c["suite"] == SUITE and not c.get("cold")}
    if "default" not in by_variant:
        return {}
    default = by_variant["default"]
    out = {"startup_ready_s": default["ready_s"]}
    if "every_engine_s" in default["phases"]:  # the engines after the first, started behind the ready server
        out["startup_every_engine_s"] = default["phases"]["every_engine_s"]
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

    server = LocalServer([model], args=["--log-level", "INFO", *VARIANTS[variant]], env={"VLLM_LOGGING_LEVEL": "INFO"})
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
    phases = startup_phases(log, launched)
    progress(
        f"startup: {variant}{' (untimed, fills the cache)' if cold else ''}: ready in {ready_s:.1f} s {phases}; "
        f"{len(texts) / seconds:,.0f} rows/s"
    )
    return {
        "seconds": seconds,
        "rows": len(texts),
        "ready_s": round(ready_s, 1),
        "phases": phases,
        "recompiled": "Compiling model again" in log,
    }


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
