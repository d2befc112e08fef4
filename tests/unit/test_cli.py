"""The embedtext command: its help stays cheap, its subcommands all listed."""

import subprocess
import sys

LOADED = "import sys; from click.testing import CliRunner; from embedtext.cli import main; "


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", LOADED + code], capture_output=True, text=True, check=True).stdout


def test_help_lists_every_command_without_importing_the_benchmarks():
    out = _run(
        "r = CliRunner().invoke(main, ['--help']); print(r.output); "
        "print('BENCH LOADED' if any(m.startswith('embedtext.bench') for m in sys.modules) else 'bench not loaded')"
    )
    for command in ("bench", "demo", "embed", "index", "info", "make-model", "serve", "sql"):
        assert f"  {command} " in out, out
    assert "bench not loaded" in out


def test_the_bench_command_loads_when_asked_for():
    out = _run("r = CliRunner().invoke(main, ['bench', '--help']); print(r.exit_code, r.output)")
    assert out.startswith("0 ") and "--only" in out


def test_mixed_modes_without_the_baseline_are_refused_before_anything_runs():
    out = _run(
        "r = CliRunner().invoke(main, ['bench', '--only', 'mixed', '--mixed-modes', 'classes,interactive_replica']); "
        "print(r.exit_code, r.output)"
    )
    assert out.startswith("2 ") and "--mixed-modes" in out and "need unpaced" in out


def test_an_unknown_mixed_phase_is_refused_before_anything_runs():
    out = _run(
        "r = CliRunner().invoke(main, ['bench', '--only', 'mixed', '--mixed-phases', 'scan,scans']); "
        "print(r.exit_code, r.output)"
    )
    assert out.startswith("2 ") and "--mixed-phases" in out and "unknown mixed phases ['scans']" in out
