"""``embedtext bench``: run the suites side by side, print cases and ratios, write JSON.

Imports only click here; each suite is imported when it runs (``embedtext --help`` stays fast).
"""

from __future__ import annotations

import os
import shlex
import sys
import time

import click

from embedtext.bench.plan import DEFAULT_SUITES, SUITES, uneven_replica_counts


def _ints(value: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in value.split(",") if x.strip()) if value else ()


def _checked_names(value: str | None, check, option: str) -> tuple[str, ...]:
    """A comma-separated option's names, refused as a usage error when ``check`` raises ValueError."""
    names = tuple(n.strip() for n in value.split(",") if n.strip()) if value else ()
    if names:
        try:
            check(names)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint=option) from None
    return names


def _progress(t0: float, message: str) -> None:
    click.echo(f"[{time.perf_counter() - t0:7.1f}s] {message}", err=True)


def compile_setting(enforce_eager: str | None, compiled: bool) -> str | None:
    """The run's ``--enforce-eager``, where ``--compiled`` says ``off``; the two must agree.

    >>> compile_setting(None, True), compile_setting("auto", False), compile_setting(None, False)
    ('off', 'auto', None)
    """
    if compiled and enforce_eager not in (None, "off"):
        raise click.UsageError(f"--compiled is --enforce-eager off, not {enforce_eager}")
    return "off" if compiled else enforce_eager


@click.command("bench")
@click.option("--quick", is_flag=True, help="Small sizes: the whole run in under 5 minutes on 2 cores.")
@click.option(
    "--only",
    "only",
    multiple=True,
    type=click.Choice(SUITES),
    help=f"Run only this suite (repeatable) [default: {', '.join(DEFAULT_SUITES)}; the others only when named].",
)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write the report here.")
@click.option("--rows", type=int, default=None, help="Rows per case of the cpu (50 tokens) and transport suites.")
@click.option(
    "--dims", default=None, help="Transport suite dims, comma-separated [default: 384,768,1024; --quick: 768]."
)
@click.option("--replicas", default=None, help="GPU suite: replica counts, comma-separated [default: 1,2,4,8,16,32].")
@click.option(
    "--gpu-model",
    type=click.Choice(["base", "tiny"]),
    default="base",
    show_default=True,
    help="GPU suite model: BERT-base in arctic-embed-m-v1.5's shape, or the tiny CPU model (code-path check).",
)
@click.option(
    "--gpu-http/--no-gpu-http",
    default=True,
    show_default=True,
    help="GPU suite: also measure vLLM's HTTP/JSON server (once is enough when replica counts are split).",
)
@click.option(
    "--gpu-processes",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="GPU suite: server processes sharing each replica count (N/K replicas each); "
    "the client spreads calls over them.",
)
@click.option(
    "--gpu-paced",
    is_flag=True,
    help="GPU suite: the servers keep their default interactive target (20 ms on a GPU) instead of none "
    "(cases get _paced): what several replicas keep as a server shared with queries runs them.",
)
@click.option(
    "--gpu-engine-loop",
    type=click.Choice(["auto", "stepped", "packed"]),
    default="auto",
    show_default=True,
    help="GPU suite: the servers' --engine-loop (cases get _stepped or _packed unless auto).",
)
@click.option(
    "--mixed-modes",
    default=None,
    help="Mixed suite: its servers, comma-separated, unpaced (the baseline) among them "
    "[default: interactive_replica,classes,unpaced].",
)
@click.option(
    "--mixed-phases",
    default=None,
    help="Mixed suite: which phases run, comma-separated (idle, scan, scan_alone, two_scans, bulk, bulk_alone, "
    "flood; the flood one round only) [default: all].",
)
@click.option("--workdir", type=click.Path(file_okay=False), default=None, help="Where generated models go.")
@click.option(
    "--enforce-eager",
    "enforce_eager",
    type=click.Choice(["auto", "on", "off"]),
    default=None,
    help="Every engine's compile setting, as the server's option of that name [default: on with --quick (a "
    "shorter start), else auto (a server's default: by the device and CPU)].",
)
@click.option(
    "--compiled",
    is_flag=True,
    help="The same as --enforce-eager off (on a GPU: CUDA graphs, as a server starts them by default).",
)
def bench_command(
    quick,
    only,
    json_path,
    rows,
    dims,
    replicas,
    gpu_model,
    gpu_http,
    gpu_processes,
    gpu_paced,
    gpu_engine_loop,
    mixed_modes,
    mixed_phases,
    workdir,
    enforce_eager,
    compiled,
) -> None:
    """Benchmarks, side by side in rotating rounds: ratios on one machine.

    embed_text against vLLM in-process, vLLM's HTTP/JSON server and the CPU peers; transports (null
    engine), latency under load, scaling, mixed workloads, the engines' own host work, the DuckDB
    extension and start-up."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    from embedtext.bench.plan import make_plan
    from embedtext.bench.session import run_bench

    uneven = uneven_replica_counts(_ints(replicas), gpu_processes)
    if uneven:
        raise click.UsageError(f"replica counts {uneven} do not split evenly over --gpu-processes {gpu_processes}")
    from embedtext.bench.mixed import check_modes, check_phases

    modes = _checked_names(mixed_modes, check_modes, "--mixed-modes")
    phases = _checked_names(mixed_phases, check_phases, "--mixed-phases")
    plan = make_plan(
        quick, rows=rows, dims=_ints(dims), workdir=workdir, enforce_eager=compile_setting(enforce_eager, compiled)
    )
    gpu = dict(replicas=_ints(replicas), model=gpu_model, rows=rows, http=gpu_http, processes=gpu_processes)
    run_bench(
        plan,
        tuple(only) or DEFAULT_SUITES,
        json_path=json_path,
        command="embedtext bench " + " ".join(shlex.quote(a) for a in sys.argv[2:]),
        gpu=gpu | dict(paced=gpu_paced, engine_loop=gpu_engine_loop),
        mixed_modes=modes,
        mixed_phases=phases,
        progress=lambda msg, t0=time.perf_counter(): _progress(t0, msg),
    )
