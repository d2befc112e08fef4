"""What a bench run starts its engines with."""

from embedtext.bench.plan import make_plan


def test_a_quick_run_is_eager_unless_asked_for_compiled_engines(tmp_path):
    assert make_plan(True, workdir=str(tmp_path)).engine_flags == ["--enforce-eager", "on"]
    assert make_plan(True, workdir=str(tmp_path), compiled=True).engine_flags == ["--enforce-eager", "off"]
    assert make_plan(False, workdir=str(tmp_path)).engine_flags == ["--enforce-eager", "off"]
