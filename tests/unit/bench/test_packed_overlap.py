"""bench/gpu/packed_overlap.py: each ratio pairs the two ways' cases of the same round and row
length, and the ratio reported is the median over rounds."""


def _case(step, overlapped, tokens, round_, rows_per_s, graphs=False):
    return {
        "step_tokens": step,
        "overlapped": overlapped,
        "graphs": graphs,
        "tokens_per_row": tokens,
        "round": round_,
        "rows_per_s": rows_per_s,
    }


def test_a_ratio_is_the_median_of_each_rounds_own_pair(gpu_script):
    probe = gpu_script("packed_overlap")
    cases = [
        # round 0: overlapped 2x; round 1: 1.5x; round 2: 1.2x. The 512-token cases must not count.
        _case(16384, True, 50, 0, 200.0),
        _case(16384, False, 50, 0, 100.0),
        _case(16384, True, 50, 1, 300.0),
        _case(16384, False, 50, 1, 200.0),
        _case(16384, True, 50, 2, 120.0),
        _case(16384, False, 50, 2, 100.0),
        _case(16384, True, 512, 0, 1.0),
        _case(16384, False, 512, 0, 1000.0),
        _case(16384, True, 50, 0, 1.0, graphs=True),  # another way: must not count either
    ]
    # Rounds pair with their own: the pooled means (620 / 400) would say 1.55.
    assert probe.median_ratio(cases, 50, (16384, True, False), (16384, False, False)) == 1.5
    assert probe.median_ratio(cases, 512, (16384, True, False), (16384, False, False)) == 0.001


def test_random_rows_have_the_length_asked_and_ids_above_the_special_tokens(gpu_script):
    probe = gpu_script("packed_overlap")
    rows = probe.random_rows(count=7, tokens=50, vocab=1000, seed=1)
    assert rows.lengths.tolist() == [50] * 7 and rows.ids.shape == (350,)
    assert rows.ids.min() >= 100 and rows.ids.max() < 1000


def _probe_result(ratio_50, ratio_512, least=0.999999):
    return {
        "steps65536_vs_steps16384_overlapped_rows_per_s_50tok": ratio_50,
        "steps65536_vs_steps16384_overlapped_rows_per_s_512tok": ratio_512,
        "least_cosine_to_serial_steps16384_50tok": least,
        "least_cosine_to_serial_steps16384_512tok": least,
    }


def test_the_later_runs_take_larger_steps_only_where_they_won_at_both_lengths_with_the_same_vectors(gpu_script):
    probe = gpu_script("packed_overlap")
    pick = probe.step_tokens_for_runs
    assert pick(_probe_result(1.30, 1.10)) == 65536
    assert pick(_probe_result(1.30, 1.01)) == 16384  # within the rounds' noise at 512 tokens
    assert pick(_probe_result(0.90, 1.20)) == 16384  # lost at 50 tokens
    assert pick(_probe_result(1.30, 1.10, least=0.9999)) == 16384  # vectors differ
    assert pick({"error": "the packed check failed"}) == 16384  # a probe that failed


def test_the_graphs_probe_pairs_each_step_size_replaying_graphs_with_the_same_steps_launching_kernels(gpu_script):
    probe = gpu_script("packed_overlap")
    ways = probe.probe_ways(graphs=True)
    assert ways[0] == (16384, True, False)  # the reference: today's overlapped steps
    assert all(overlapped for _, overlapped, _ in ways) and len(set(ways)) == 4
    pairs = probe.probe_pairs(graphs=True)
    assert pairs["graphs_vs_launches_steps65536_overlapped"] == ((65536, True, True), (65536, True, False))
    assert set(pairs) == {f"graphs_vs_launches_steps{s}_overlapped" for s in (16384, 65536)}
    assert probe.probe_ways(graphs=False)[0] == (16384, False, False)  # the step pick's reference
    assert not any(graphed for _, _, graphed in probe.probe_ways(graphs=False))
    assert probe.way_name((65536, True, True)) == "overlapped_steps65536_graphs"
