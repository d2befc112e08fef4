"""``embedtext bench``: run the suites, print cases and ratios, write JSON. Imports only click here
(``embedtext --help`` stays fast); each suite is imported when it runs."""

from __future__ import annotations

import os
import shlex
import signal
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


@click.command("bench")
@click.option("--quick", is_flag=True, help="Small sizes: the whole run in under 5 minutes on 2 cores.")
@click.option(
    "--only",
    multiple=True,
    type=click.Choice(SUITES),
    help=f"Run only this suite (repeatable) [default: {', '.join(DEFAULT_SUITES)}; the others only when named].",
)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the report here.")
@click.option("--rows", type=int, help="Rows per case of the cpu (50 tokens), transport and gpu suites.")
@click.option("--dims", help="Transport suite dims, comma-separated [default: 384,768,1024; --quick: 768].")
@click.option("--replicas", help="GPU suite: replica counts, comma-separated [default: 1,2,4,8,16,32].")
@click.option(
    "--gpu-model", type=click.Choice(["base", "tiny"]), default="base", help="GPU suite: BERT-base or tiny [base]."
)
@click.option("--gpu-http/--no-gpu-http", default=True, help="GPU suite: also measure vLLM's HTTP/JSON server.")
@click.option(
    "--gpu-processes", type=click.IntRange(1), default=1, help="GPU suite: server processes per replica count."
)
@click.option("--gpu-paced", is_flag=True, help="GPU suite: the servers keep their interactive target (cases _paced).")
@click.option(
    "--gpu-engine-loop",
    type=click.Choice(["auto", "stepped", "packed"]),
    default="auto",
    help="GPU suite: the servers' loop (auto: the server's default, packed).",
)
@click.option(
    "--gpu-set",
    multiple=True,
    metavar="NAME=VALUE",
    help="GPU suite: an advanced setting for its servers (repeatable; cases tagged _NAME_VALUE).",
)
@click.option("--mixed-modes", help="Mixed suite: its servers, comma-separated, unpaced among them [default: all].")
@click.option("--mixed-phases", help="Mixed suite: its phases, comma-separated [default: all].")
@click.option("--workdir", type=click.Path(file_okay=False), help="Where generated models go.")
@click.option(
    "--enforce-eager",
    type=click.Choice(["auto", "on", "off"]),
    help="Every engine's compile setting [default: on with --quick, else auto, as a server's].",
)
def bench_command(**opts) -> None:
    """Benchmarks, side by side in rotating rounds: ratios on one machine (docs/benchmarks.md)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    from embedtext.bench.mixed import check_modes, check_phases
    from embedtext.bench.plan import make_plan
    from embedtext.bench.session import run_bench

    replicas, processes = _ints(opts["replicas"]), opts["gpu_processes"]
    uneven = uneven_replica_counts(replicas, processes)
    if uneven:
        raise click.UsageError(f"replica counts {uneven} do not split evenly over --gpu-processes {processes}")
    plan = make_plan(
        opts["quick"],
        rows=opts["rows"],
        dims=_ints(opts["dims"]),
        workdir=opts["workdir"],
        enforce_eager=opts["enforce_eager"],
    )
    gpu = dict(
        replicas=replicas, model=opts["gpu_model"], rows=opts["rows"], http=opts["gpu_http"], processes=processes
    )
    # SIGTERM (a timeout, a scheduler) unwinds like Ctrl-C, so each suite's servers are stopped on
    # the way out; unhandled, it left them and their engines running.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    run_bench(
        plan,
        opts["only"] or DEFAULT_SUITES,
        json_path=opts["json_path"],
        command="embedtext bench " + " ".join(shlex.quote(a) for a in sys.argv[2:]),
        gpu=gpu | dict(paced=opts["gpu_paced"], engine_loop=opts["gpu_engine_loop"], settings=opts["gpu_set"]),
        mixed_modes=_checked_names(opts["mixed_modes"], check_modes, "--mixed-modes"),
        mixed_phases=_checked_names(opts["mixed_phases"], check_phases, "--mixed-phases"),
        progress=lambda msg, t0=time.perf_counter(): _progress(t0, msg),
    )
