"""What a bench run starts its engines with."""

from click.testing import CliRunner

from embedtext.bench.cli import bench_command
from embedtext.bench.plan import make_plan

AMX = frozenset({"avx2", "avx512f", "avx512_bf16", "amx_bf16"})
AVX512 = frozenset({"avx2", "avx512f", "avx512_bf16"})
AVX2 = frozenset({"avx2", "fma"})


def flags_of(tmp_path, quick, device="cpu", cpu=AVX512, **setting):
    return make_plan(quick, workdir=str(tmp_path), device=device, flags=cpu, **setting).engine_flags


def test_a_quick_run_is_eager_and_a_full_one_runs_as_a_servers_default(tmp_path):
    assert flags_of(tmp_path, True) == ["--set", "enforce_eager=on"]
    assert flags_of(tmp_path, True, enforce_eager="off") == ["--set", "enforce_eager=off"]
    # A full run resolves auto as the server would on this device and CPU, once for every engine.
    assert flags_of(tmp_path, False, cpu=AVX2) == ["--set", "enforce_eager=on"]
    assert flags_of(tmp_path, False, cpu=AVX512) == ["--set", "enforce_eager=off"]
    assert flags_of(tmp_path, False, cpu=AMX, enforce_eager="on") == ["--set", "enforce_eager=on"]
    assert flags_of(tmp_path, False, device="cuda", cpu=AMX) == ["--set", "enforce_eager=off"]
    assert flags_of(tmp_path, False, cpu=AMX, enforce_eager="off") == ["--set", "enforce_eager=off"]


def test_the_bench_refuses_a_compile_setting_it_cannot_follow():
    # click refuses an unknown setting before the bench starts anything.
    result = CliRunner().invoke(bench_command, ["--quick", "--only", "cpu", "--enforce-eager", "sometimes"])
    assert result.exit_code == 2 and "'sometimes' is not one of" in result.output, result.output


def test_every_suite_the_cli_offers_has_a_step_in_a_run():
    from embedtext.bench.plan import DEFAULT_SUITES, SUITES
    from embedtext.bench.session import STEPS

    assert {suite for names, _ in STEPS for suite in names} == set(SUITES) >= set(DEFAULT_SUITES)


def test_generated_models_are_made_once_per_workdir_and_shape(tmp_path):
    """A second run on the same --workdir reuses a model of the same shape, and remakes one whose
    shape changed (the GPU headline's runs share one BERT-base)."""
    import json

    from embedtext.bench.plan import GeneratedModels
    from embedtext.server.models.synthetic import write_synthetic_bert

    def models():  # make-model's writer in this process, not in a child (seconds of imports each)
        return GeneratedModels(tmp_path, make=write_synthetic_bert)

    shape = dict(layers=1, hidden=32, heads=1, max_tokens=64)
    path = models().get("m", **shape)
    config = path / "config.json"
    made = config.stat().st_mtime_ns
    assert models().get("m", **shape) == path
    assert config.stat().st_mtime_ns == made  # not written again
    models().get("m", **(shape | dict(hidden=64, heads=2)))
    assert json.loads(config.read_text())["hidden_size"] == 64
