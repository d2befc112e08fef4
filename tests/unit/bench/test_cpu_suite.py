"""The cpu suite's ratios: per-round medians where its paths ran in rounds (bench/cpu_suite.py)."""

from embedtext.bench.cpu_suite import cpu_ratios


def _case(name, tokens, rows_per_s, **extra):
    return {"suite": "cpu", "name": f"{name}_{tokens}tok", "tokens_per_row": tokens, "rows_per_s": rows_per_s, **extra}


def test_rounds_give_the_median_of_per_round_ratios_not_the_ratio_of_medians():
    cases = [
        _case("udf_embed_text", 50, 100.0),
        # Its median rows/s gives 100 / 80 = 1.25; the rounds were 1.0, 1.1 and 2.0 (host drift).
        _case("udf_vllm_http_json", 50, 80.0, ratio_key="udf_vs_http_json", ratio_by_round=[1.0, 2.0, 1.1]),
        _case("inprocess_llm_embed", 512, 10.0, ratio_key="udf_vs_inprocess", ratio_by_round=[0.9, 0.95, 1.0]),
        _case("udf_embed_text", 512, 9.0),
        {**_case("udf_embed_text", 50, 1.0), "suite": "transport"},
    ]
    assert cpu_ratios(cases) == {"udf_vs_http_json": 1.1, "udf_vs_inprocess_512": 0.95}


def test_paths_timed_one_after_the_other_give_the_ratio_of_their_speeds():
    cases = [
        _case("udf_embed_text", 50, 120.0),
        _case("inprocess_llm_embed", 50, 100.0),
        _case("udf_filtered_chunks", 50, 60.0),
        _case("udf_materialized", 50, 90.0),
    ]
    assert cpu_ratios(cases) == {
        "udf_vs_inprocess": 1.2,
        "filtered_vs_full_chunks": 0.5,
        "materialized_vs_filtered": 1.5,
    }
