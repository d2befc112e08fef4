"""The mixed suite's bookkeeping on two NULL ENGINE servers (no model: what is checked is that every
phase runs on both modes in each round and the ratios pair them; the figures mean nothing here)."""

import asyncio
import time

from embedtext.bench.bulk_loads import BULK_ROWS, probed_load
from embedtext.bench.mixed import mixed_ratios, run_mixed
from embedtext.bench.mixed_modes import MODES
from embedtext.bench.probes import PROBE_PARTS


def test_every_phase_runs_on_both_modes_and_the_ratios_pair_them(tiny_model_dir):
    bulk = [f"bulk row {i} of a table" for i in range(64)]
    probes = [f"query {i}" for i in range(8)]
    lines: list[str] = []
    cases = run_mixed(
        [f"tiny={tiny_model_dir}"],
        bulk,
        probes,
        clients=2,
        seconds=0.8,
        rounds=2,
        scan_rows=100,
        flood_clients=3,
        flood_seconds=0.5,
        args=["--set", "engine=null"],
        settle_s=0,
        progress=lines.append,
    )
    # Each server gets its untimed bulk call before the first timed phase.
    first_round = next(i for i, line in enumerate(lines) if "round 1" in line)
    assert {line.split()[1] for line in lines[:first_round] if "warmed up" in line} == set(MODES)
    by = {(c["mode"], c["kind"]): c for c in cases}
    kinds = ("idle", "scan", "scan_alone", "two_scans", "bulk2", "bulk2_alone", "flood3")
    assert set(by) == {(m, k) for m in MODES for k in kinds}
    for mode in MODES:
        assert by[(mode, "idle")]["probes"] > 0 and by[(mode, "idle")]["rows"] == 0
        assert by[(mode, "bulk2")]["probes"] > 0 and by[(mode, "bulk2")]["rows"] > 0
        assert by[(mode, "bulk2_alone")]["probes"] == 0 and by[(mode, "bulk2_alone")]["rows"] > 0
        assert by[(mode, "bulk2")]["rows"] % len(bulk) == 0  # whole bulk calls only
        assert by[(mode, "scan")]["probes"] > 0 and by[(mode, "scan")]["rows"] == 2 * 100  # both rounds
        assert by[(mode, "scan_alone")]["probes"] == 0 and by[(mode, "scan_alone")]["rows"] == 2 * 100
        for kind in ("idle", "scan", "bulk2"):  # each probe's reply said where its time went
            case = by[(mode, kind)]
            assert all(case[f"{part}_p99_ms"] >= case[f"{part}_p50_ms"] for part in PROBE_PARTS)
            assert case["to_server_p50_ms"] > 0  # the call came before the handler, on one wall clock
        for kind in kinds:  # each phase asked the server how late its event loop ran
            assert 0 <= by[(mode, kind)]["loop_late_p99_ms"] <= by[(mode, kind)]["loop_late_max_ms"]
            # and split the host's cores among the server, the bench, the prober and idle
            cores = by[(mode, kind)]["cores"]
            assert {"server", "server:main-thread", "bench", "prober", "host idle"} <= set(cores), cores
            assert all(value >= 0 for value in cores.values())
        assert "engine_p50_ms" not in by[(mode, "bulk2_alone")] and "engine_p50_ms" not in by[(mode, "two_scans")]
        two = by[(mode, "two_scans")]
        assert len(two["scan_seconds"]) == 2 and len(two["scan_rows_per_s"]) == 2 and two["scan_ratio"] >= 1
        # each round's ratio, the worst of them reported
        assert len(two["scan_ratio_by_round"]) == 2 and two["scan_ratio"] == max(two["scan_ratio_by_round"])
        assert sum("two_scans" in line and "x apart" in line for line in lines) == len(MODES) * 2
        flood = by[(mode, "flood3")]  # one round only
        assert flood["served_calls"] + flood["failed_calls"] >= 3 and flood["rounds"] == 2
        assert flood["rows_lost"] == 2048 * flood["failed_calls"]
    defaults_keys = {
        "mixed_interactive_p99_scan",
        "mixed_interactive_p99_bulk2",
        "mixed_interactive_p99_ms_scan",
        "mixed_interactive_p99_ms_bulk2",
        "mixed_interactive_p99_vs_slo_scan",
        "mixed_interactive_p99_vs_slo_bulk2",
        "mixed_bulk_rows_per_s",
        "mixed_bulk_rows_per_s_alone",
        "mixed_scan_rows_per_s",
        "mixed_scan_rows_per_s_alone",
        "mixed_two_scans_ratio",
        "mixed_flood_errors",
    }
    # The defaults (the interactive replica) hold the target keys; the shared engines get their own.
    classes_keys = {key.replace("mixed_", "mixed_classes_", 1) for key in defaults_keys}
    assert set(mixed_ratios(cases)) == defaults_keys | classes_keys


def test_a_paced_server_is_read_against_the_baseline_apart_from_the_defaults():
    """With GPU_MODES the defaults keep the target keys and each paced server gets its own, each
    over the baseline's (unpaced) same phase."""
    from embedtext.bench.mixed_modes import GPU_MODES

    def case(mode, kind, rows_per_s, p99_ms=None, **extra):
        return {
            "suite": "mixed",
            "mode": mode,
            "kind": kind,
            "rows_per_s": rows_per_s,
            "p99_ms": p99_ms,
            "slo_ms": 20.0,
            **extra,
        }

    speeds = {"classes": 900.0, "interactive_replica": 500.0, "unpaced": 1000.0}
    assert set(speeds) == set(GPU_MODES)
    cases = []
    for mode, speed in speeds.items():
        cases += [
            case(mode, "scan", speed, p99_ms=speed / 50),
            case(mode, "bulk4", speed, p99_ms=speed / 50),
            case(mode, "bulk4_alone", speed),
            case(mode, "scan_alone", 2 * speed if mode == "unpaced" else speed),
            case(mode, "two_scans", speed, scan_ratio=1.1),
        ]
    ratios = mixed_ratios(cases)
    assert ratios["mixed_bulk_rows_per_s"] == 0.9 and ratios["mixed_scan_rows_per_s"] == 0.9
    # The scan alone has its own key: it is not the bulk clients' alone.
    assert ratios["mixed_scan_rows_per_s_alone"] == 0.45 and ratios["mixed_bulk_rows_per_s_alone"] == 0.9
    assert ratios["mixed_interactive_p99_vs_slo_scan"] == 0.9 and ratios["mixed_interactive_p99_scan"] == 0.9
    assert ratios["mixed_interactive_replica_bulk_rows_per_s"] == 0.5
    assert ratios["mixed_interactive_replica_interactive_p99_bulk4"] == 0.5
    assert not any(key.startswith("mixed_unpaced") for key in ratios)


def test_the_probes_come_from_a_process_of_their_own_so_a_busy_bench_loop_does_not_hold_them(tiny_model_dir):
    """While this process's event loop is blocked (as bulk clients' replies or a DuckDB scan can
    hold it), the prober's process keeps its schedule: more probes than the MIN_PROBES an
    in-process prober would send once the loop is free, each with the server's parts."""
    import asyncio
    import time

    from embedtext.bench.probes import MIN_PROBES, PROBE_GAP_S, Prober
    from embedtext.bench.servers import embedtext_server

    blocked_s = 40 * PROBE_GAP_S

    async def blocked_phase(prober, target):
        began = time.monotonic()
        probing = asyncio.ensure_future(prober.probe(target, ["q1", "q2"], lambda: time.monotonic() - began > 0.3))
        await asyncio.sleep(0)
        time.sleep(blocked_s)  # noqa: ASYNC251 -- holds this loop: nothing here can send or read a probe
        return await probing

    with embedtext_server([f"tiny={tiny_model_dir}"], args=["--set", "engine=null"]) as server, Prober() as prober:
        prober.warm_up(server.target, ["q0"])  # the prober's process is up and has called once
        times = asyncio.run(blocked_phase(prober, server.target))
    assert len(times) > MIN_PROBES
    assert all(t.engine_s is not None and t.outside_s is not None and t.late_s is not None for t in times)


def test_probes_keep_their_schedule_while_earlier_ones_wait_open_loop():
    """A slow answer does not hold back the next probe: every probe is sent before the first is
    answered, and each latency counts from its scheduled start (no waits left uncounted)."""
    import asyncio

    from embedtext.bench.probes import MIN_PROBES, PROBE_GAP_S, send_probes

    phase = MIN_PROBES + 2  # probes sent before the phase ends; none is answered until then
    events: list[tuple[str, str]] = []

    async def main() -> list[float]:
        phase_over = asyncio.Event()

        async def slow_server(text: str) -> None:
            events.append(("sent", text))
            try:  # a closed-loop prober would wait here for ever: answered after 1 s then
                await asyncio.wait_for(phase_over.wait(), 1.0)
            except TimeoutError:
                pass
            events.append(("answered", text))

        def done() -> bool:
            if len(events) >= phase:
                phase_over.set()
            return phase_over.is_set()

        return await send_probes(slow_server, [f"q{i}" for i in range(3)], done)

    times = asyncio.run(main())
    latencies = [t.total_s for t in times]
    assert all(t.rest_s is None for t in times)  # no reply, no server parts
    kinds = [kind for kind, _ in events]
    sent = kinds.count("sent")
    assert sent >= phase and kinds == ["sent"] * sent + ["answered"] * sent  # all sent before the first answer
    assert len(latencies) == sent
    assert [text for kind, text in events if kind == "sent"][:4] == ["q0", "q1", "q2", "q0"]
    # The first probe was answered after the last was sent: counted from its own schedule, its
    # latency holds the whole schedule (a lower bound: sleeps never end early).
    assert max(latencies) >= (sent - 1) * PROBE_GAP_S


def test_the_p99_is_judged_against_the_target_the_classes_server_held():
    def case(mode, p99_ms, slo_ms):
        return {"suite": "mixed", "mode": mode, "kind": "scan", "p99_ms": p99_ms, "rows_per_s": 100.0, "slo_ms": slo_ms}

    on_gpu = mixed_ratios([case("classes", 30.0, 20.0), case("unpaced", 900.0, 20.0)])
    assert on_gpu["mixed_interactive_p99_vs_slo_scan"] == 1.5  # over a 20 ms target
    assert on_gpu["mixed_interactive_p99_ms_scan"] == 30.0
    on_cpu = mixed_ratios([case("classes", 200.0, 250.0), case("unpaced", 900.0, 250.0)])
    assert on_cpu["mixed_interactive_p99_vs_slo_scan"] == 0.8


def test_a_run_without_the_baseline_or_with_an_unknown_mode_is_refused_before_any_server_starts():
    import pytest

    for modes, why in ((("classes", "short_switch"), "need unpaced"), (("unpaced", "turbo"), "unknown mixed modes")):
        with pytest.raises(ValueError, match=why):
            run_mixed(["no-such-model"], ["x"], ["q"], modes=modes, progress=lambda _line: None)


def test_a_run_of_some_phases_runs_those_only(tiny_model_dir):
    """And after each phase the cases so far are handed on (the bench writes them as it goes)."""
    so_far = []
    cases = run_mixed(
        [f"tiny={tiny_model_dir}"],
        [f"bulk row {i} of a table" for i in range(64)],
        [f"query {i}" for i in range(8)],
        rounds=2,
        scan_rows=100,
        flood_clients=2,
        flood_seconds=0.3,
        args=["--set", "engine=null"],
        modes=("classes", "unpaced"),
        phases=("flood", "scan_alone"),
        settle_s=0,
        progress=lambda _line: None,
        on_phase=so_far.append,
    )
    by = {(c["mode"], c["kind"]): c for c in cases}
    assert set(by) == {(m, k) for m in ("classes", "unpaced") for k in ("scan_alone", "flood2")}
    assert by[("unpaced", "scan_alone")]["rows"] == 2 * 100  # every round; the flood in the last only
    assert set(by[("unpaced", "flood2")]["first_errors"]) == set(by[("unpaced", "flood2")]["errors"])
    # Rounds alternate the order: classes, unpaced; then unpaced (scan, flood), classes (scan, flood).
    assert len(so_far) == 2 + 2 * 2
    assert [(c["mode"], c["kind"], c["rows"]) for c in so_far[0]] == [("classes", "scan_alone", 100)]
    assert [(c["mode"], c["kind"]) for c in so_far[3]] == [
        ("classes", "scan_alone"),
        ("unpaced", "flood2"),
        ("unpaced", "scan_alone"),
    ]
    assert so_far[-1] == cases


def test_an_unknown_phase_is_refused_before_any_server_starts():
    import pytest

    with pytest.raises(ValueError, match="unknown mixed phases"):
        run_mixed(["no-such-model"], ["x"], ["q"], phases=("scan", "scans"), progress=lambda _line: None)


def test_a_probe_s_time_splits_into_the_server_s_parts_from_its_reply():
    """The reply's queue and engine times are the server's; the rest is everything around them,
    split by the reply's tokenizing and handler times into the server's handling and outside it."""
    from embedtext.bench.probes import ProbeTime, probe_figures, probe_parts_ms
    from embedtext.protocol import embedding_pb2 as pb

    reply = pb.EmbedResponse(
        queue_time_ns=2_000_000, inference_time_ns=5_000_000, tokenize_time_ns=500_000, server_time_ns=8_000_000
    )
    probe = ProbeTime.of(0.010, reply, late_s=0.0005)
    assert (probe.queue_s, probe.engine_s) == (0.002, 0.005)
    assert abs(probe.rest_s - 0.003) < 1e-12
    assert abs(probe.handling_s - 0.0005) < 1e-12 and abs(probe.outside_s - 0.0015) < 1e-12
    assert abs(probe.tokenize_s + probe.handling_s + probe.outside_s + probe.late_s - probe.rest_s) < 1e-12
    got = probe_figures([probe, ProbeTime.of(0.020, reply, late_s=0.0005)])
    assert got["latencies"] == [0.010, 0.020] and len(got["probe_rest"]) == 2
    parts = probe_parts_ms(got)
    assert parts["engine_p50_ms"] == 5.0 and parts["queue_p99_ms"] == 2.0 and parts["rest_p50_ms"] == 8.0
    assert parts["outside_p50_ms"] == 6.5 and parts["tokenize_p50_ms"] == 0.5 and parts["late_p99_ms"] == 0.5
    # A reply from a server that sends no handler time splits only queue / engine / rest.
    old = ProbeTime.of(0.010, pb.EmbedResponse(queue_time_ns=2_000_000, inference_time_ns=5_000_000))
    assert set(probe_figures([old])) == {"latencies", "probe_queue", "probe_engine", "probe_rest"}
    # Nor does a probe sent without a schedule say how late it was.
    assert "probe_late" not in probe_figures([ProbeTime.of(0.010, reply)])
    # A phase where some reply lacked them reports the latencies alone.
    assert set(probe_figures([probe, ProbeTime(0.5)])) == {"latencies"}


def test_outside_the_server_splits_at_the_handler_s_start_into_the_way_in_and_the_way_back():
    """The reply's handler start (the server's wall clock) against the prober's wall clock at the
    call: the way in is between them, the way back what is left of outside."""
    from embedtext.bench.probes import ProbeTime, probe_figures, probe_parts_ms
    from embedtext.protocol import embedding_pb2 as pb

    sent = 1_800_000_000_000_000_000
    reply = pb.EmbedResponse(
        queue_time_ns=2_000_000,
        inference_time_ns=5_000_000,
        tokenize_time_ns=500_000,
        server_time_ns=8_000_000,
        handler_start_unix_ns=sent + 1_000_000,
    )
    probe = ProbeTime.of(0.010, reply, late_s=0.0005, sent_unix_ns=sent)
    assert abs(probe.outside_s - 0.0015) < 1e-12
    assert abs(probe.to_server_s - 0.001) < 1e-12 and abs(probe.from_server_s - 0.0005) < 1e-12
    parts = probe_parts_ms(probe_figures([probe]))
    assert parts["to_server_p50_ms"] == 1.0 and parts["from_server_p99_ms"] == 0.5
    # A server that sends no handler start, or a probe that kept no send time: outside stays whole.
    for unsplit in (
        ProbeTime.of(0.010, reply, late_s=0.0005),
        ProbeTime.of(0.01, pb.EmbedResponse(server_time_ns=1), 0, sent),
    ):
        assert unsplit.to_server_s is None and unsplit.from_server_s is None
        assert "probe_to_server" not in probe_figures([unsplit])


def test_the_servers_that_step_their_engines_keep_a_step_timeline_and_the_others_do_not():
    from embedtext.bench.mixed_modes import MODE_ARGS, server_args, steps_its_engines

    stepped = {mode: steps_its_engines(server_args(mode, 20.0)) for mode in MODE_ARGS}
    assert all(stepped.values())
    # The null engine (the bookkeeping test's servers) has no steps: it is given no timeline.
    assert not any(steps_its_engines(["--set", "engine=null", *server_args(mode, None)]) for mode in MODE_ARGS)


def test_on_a_gpu_the_targets_are_read_on_the_interactive_replica():
    """The cases marked ``defaults`` (on a GPU the interactive replica) give the target keys; the
    shared engines' ``classes`` then keeps keys of its own."""

    def case(mode, kind, rows_per_s):
        return {"suite": "mixed", "mode": mode, "kind": kind, "rows_per_s": rows_per_s, "p99_ms": rows_per_s / 50}

    speeds = {"interactive_replica": 1500.0, "classes": 800.0, "unpaced": 1000.0}
    cases = [
        {**case(mode, kind, speed), "slo_ms": 20.0, "defaults": mode == "interactive_replica"}
        for mode, speed in speeds.items()
        for kind in ("scan", "bulk4")
    ]
    ratios = mixed_ratios(cases)
    assert ratios["mixed_bulk_rows_per_s"] == 1.5 and ratios["mixed_interactive_p99_vs_slo_scan"] == 1.5
    assert ratios["mixed_classes_bulk_rows_per_s"] == 0.8
    assert not any(key.startswith("mixed_interactive_replica_") for key in ratios)


class DonePollingProber:
    """A STAND-IN for ``Prober`` that sends no probes: it polls ``done`` as the real one does and
    keeps when it first said yes."""

    def __init__(self) -> None:
        self.done_at: float | None = None

    async def probe(self, target, probe_texts, done):
        while not done():
            await asyncio.sleep(0.001)
        self.done_at = time.monotonic()
        return []


def test_the_probes_run_until_the_last_bulk_call_ends(tiny_model_dir):
    """The bulk loops stop starting calls after ``seconds``, but the calls in flight run to their
    end (on a 2-core CPU, most of the phase): the probes must cover that part too, or "bulk
    rows/s with queries" is mostly without them. The call that ends the loop ends after the 2 s."""
    from embedtext.bench.servers import embedtext_server

    bulk = [f"bulk row {i} of a table" for i in range(BULK_ROWS)]
    prober = DonePollingProber()
    with embedtext_server([f"tiny={tiny_model_dir}"], args=["--set", "engine=null"]) as server:
        began = time.monotonic()
        times, rows, elapsed = asyncio.run(probed_load(server.target, bulk, ["query"], 1, 2.0, prober))
    assert rows >= BULK_ROWS and rows % BULK_ROWS == 0 and times == []
    assert prober.done_at is not None and prober.done_at - began >= elapsed  # not before the call ended


def test_a_mode_with_a_target_suffix_holds_that_target_and_the_others_the_runs():
    """``classes_slo500`` beside ``classes``: the same engines' settings, each server its own target."""
    import pytest

    from embedtext.bench.mixed_modes import check_modes, server_args

    check_modes(["classes_slo500", "classes", "unpaced"])
    assert server_args("classes_slo500", 250.0) == (*server_args("classes"), "--interactive-slo-ms", "500")
    assert server_args("classes", 250.0) == (*server_args("classes"), "--interactive-slo-ms", "250")
    assert server_args("unpaced", 250.0) == server_args("unpaced")  # the baseline holds no target
    with pytest.raises(ValueError, match="unknown mixed modes"):
        check_modes(["nonsense_slo500", "unpaced"])
    with pytest.raises(ValueError, match="needs a paced mode"):
        check_modes(["unpaced_slo500", "unpaced"])
