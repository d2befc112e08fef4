"""The dtype suite's quality figures on vectors whose answers are known (no engine)."""

import numpy as np

from embedtext.bench.dtype_quality import dtype_ratios, overlap, quality_ratios, top_k


def _vectors(rows=200, dim=16, seed=0):
    return np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)


def test_a_query_never_finds_itself():
    v = _vectors()
    rows = np.arange(0, 200, 10)
    found = top_k(v, v[rows], rows)
    assert found.shape == (20, 10)
    assert not (found == rows[:, None]).any()


def test_identical_vectors_agree_fully():
    v = _vectors()
    q = quality_ratios(v, v.copy(), reference=v)
    assert q["dtype_bf16_cosine_min"] >= 0.999999 and q["dtype_bf16_top10_overlap_worst"] == 1.0
    assert q["dtype_mixed_top10_overlap"] == 1.0 and q["dtype_float32_vs_reference_cosine_min"] >= 0.999999


def test_noise_lowers_cosine_and_overlap_in_step():
    v = _vectors()
    slight = quality_ratios(v, v + 0.01 * _vectors(seed=1), reference=None)
    heavy = quality_ratios(v, v + 1.0 * _vectors(seed=1), reference=None)
    assert heavy["dtype_bf16_cosine_p01"] < slight["dtype_bf16_cosine_p01"] < 1.0
    assert heavy["dtype_bf16_top10_overlap"] < slight["dtype_bf16_top10_overlap"]
    assert "dtype_float32_vs_reference_cosine_min" not in slight


def test_overlap_counts_shared_rows_not_order():
    assert overlap(np.array([[1, 2, 3]]), np.array([[3, 1, 9]])).tolist() == [2 / 3]


def test_quality_figures_come_from_this_suite_only():
    cases = [
        {"suite": "dtype", "name": "dtype_quality", "quality": {"dtype_bf16_cosine_p01": 0.9995}},
        {"suite": "cpu", "name": "x", "quality": {"dtype_bf16_cosine_p01": 0.5}},
    ]
    assert dtype_ratios(cases) == {"dtype_bf16_cosine_p01": 0.9995}
