"""The mixed suite's bookkeeping on NULL ENGINE servers (no model: what is checked is that every
phase runs on every mode in each round and the ratios pair them; the figures mean nothing here)."""

import asyncio
import time

import pytest

from embedtext.bench.bulk_loads import BULK_ROWS, probed_load
from embedtext.bench.mixed import MODE_NAMES, mixed_ratios, run_mixed

NULL = ["--set", "engine=null"]


def test_every_phase_runs_on_every_mode_and_the_ratios_pair_them(tiny_model_dir):
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
        args=NULL,
        settle_s=0,
        progress=lines.append,
    )
    # Each server gets its untimed bulk call before its first timed phase.
    assert {line.split()[1] for line in lines if "warmed up" in line} == set(MODE_NAMES)
    by = {(c["mode"], c["workload"]): c for c in cases}
    kinds = ("idle", "scan", "scan_alone", "two_scans", "bulk2", "bulk2_alone", "flood3")
    assert set(by) == {(m, k) for m in MODE_NAMES for k in kinds}
    for mode in MODE_NAMES:
        assert by[(mode, "idle")]["probes"] > 0 and by[(mode, "idle")]["rows"] == 0
        assert by[(mode, "bulk2")]["probes"] > 0 and by[(mode, "bulk2")]["rows"] > 0
        assert by[(mode, "bulk2_alone")]["probes"] == 0 and by[(mode, "bulk2_alone")]["rows"] > 0
        assert by[(mode, "bulk2")]["rows"] % len(bulk) == 0  # whole bulk calls only
        assert by[(mode, "scan")]["probes"] > 0 and by[(mode, "scan")]["rows"] == 2 * 100  # both rounds
        assert by[(mode, "scan_alone")]["probes"] == 0 and by[(mode, "scan_alone")]["rows"] == 2 * 100
        for kind in ("idle", "scan", "bulk2"):
            assert by[(mode, kind)]["p99_ms"] >= by[(mode, kind)]["p50_ms"] > 0
        assert by[(mode, "bulk2_alone")]["p50_ms"] is None and by[(mode, "two_scans")]["p50_ms"] is None
        two = by[(mode, "two_scans")]
        # each round's ratio, the worst of them reported
        assert len(two["scan_ratio_by_round"]) == 2 and two["scan_ratio"] == max(two["scan_ratio_by_round"]) >= 1
        flood = by[(mode, "flood3")]  # one round only
        assert flood["served_calls"] + flood["failed_calls"] >= 3 and flood["rounds"] == 1
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


def _case(mode, kind, rows_per_s, p99_ms=None, slo_ms=20.0, **extra):
    return {
        "suite": "mixed",
        "mode": mode,
        "workload": kind,
        "rows_per_s": rows_per_s,
        "p99_ms": p99_ms,
        "slo_ms": slo_ms,
        **extra,
    }


def test_each_mode_is_read_against_the_baseline_and_the_targets_on_the_defaults():
    speeds = {"classes": 900.0, "interactive_replica": 500.0, "unpaced": 1000.0}
    cases = []
    for mode, speed in speeds.items():
        cases += [
            _case(mode, "scan", speed, p99_ms=speed / 50),
            _case(mode, "bulk4", speed, p99_ms=speed / 50),
            _case(mode, "bulk4_alone", speed),
            _case(mode, "scan_alone", 2 * speed if mode == "unpaced" else speed),
            _case(mode, "two_scans", speed, scan_ratio=1.1),
        ]
    ratios = mixed_ratios(cases)
    assert ratios["mixed_bulk_rows_per_s"] == 0.5 and ratios["mixed_scan_rows_per_s"] == 0.5
    # The scan alone has its own key: it is not the bulk clients' alone.
    assert ratios["mixed_scan_rows_per_s_alone"] == 0.25 and ratios["mixed_bulk_rows_per_s_alone"] == 0.5
    assert ratios["mixed_interactive_p99_vs_slo_scan"] == 0.5 and ratios["mixed_interactive_p99_scan"] == 0.5
    assert ratios["mixed_classes_bulk_rows_per_s"] == 0.9
    assert not any(key.startswith(("mixed_unpaced", "mixed_interactive_replica_")) for key in ratios)
    # Without the interactive replica, the targets are read on the shared engines.
    shared = mixed_ratios([c for c in cases if c["mode"] != "interactive_replica"])
    assert shared["mixed_bulk_rows_per_s"] == 0.9


def test_the_p99_is_judged_against_the_target_the_server_held():
    on_gpu = mixed_ratios([_case("classes", "scan", 100.0, 30.0), _case("unpaced", "scan", 100.0, 900.0)])
    assert on_gpu["mixed_interactive_p99_vs_slo_scan"] == 1.5 and on_gpu["mixed_interactive_p99_ms_scan"] == 30.0
    on_cpu = mixed_ratios([_case("classes", "scan", 100.0, 200.0, 250.0), _case("unpaced", "scan", 100.0, 900.0)])
    assert on_cpu["mixed_interactive_p99_vs_slo_scan"] == 0.8


@pytest.mark.parametrize(
    "options, why",
    [
        ({"modes": ("classes",)}, "need unpaced"),
        ({"modes": ("unpaced", "turbo")}, "unknown mixed modes"),
        ({"phases": ("scan", "scans")}, "unknown mixed phases"),
    ],
)
def test_a_bad_run_is_refused_before_any_server_starts(options, why):
    with pytest.raises(ValueError, match=why):
        run_mixed(["no-such-model"], ["x"], ["q"], progress=lambda _line: None, **options)


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
        args=NULL,
        modes=("classes", "unpaced"),
        phases=("flood", "scan_alone"),
        settle_s=0,
        progress=lambda _line: None,
        on_phase=so_far.append,
    )
    by = {(c["mode"], c["workload"]): c for c in cases}
    assert set(by) == {(m, k) for m in ("classes", "unpaced") for k in ("scan_alone", "flood2")}
    assert by[("unpaced", "scan_alone")]["rows"] == 2 * 100  # every round; the flood in one only
    assert set(by[("unpaced", "flood2")]["first_errors"]) == set(by[("unpaced", "flood2")]["errors"])
    assert [len(cases_then) for cases_then in so_far] == [2, 4] and so_far[-1] == cases


def test_the_probes_come_from_a_process_of_their_own_so_a_busy_bench_loop_does_not_hold_them(tiny_model_dir):
    """While this process's event loop is blocked (as bulk clients' replies or a DuckDB scan can
    hold it), the prober's process keeps its schedule: more probes than the MIN_PROBES an
    in-process prober would send once the loop is free."""
    from embedtext.bench.probes import MIN_PROBES, PROBE_GAP_S, Prober
    from embedtext.bench.servers import embedtext_server

    blocked_s = 40 * PROBE_GAP_S

    async def blocked_phase(prober, target):
        began = time.monotonic()
        probing = asyncio.ensure_future(prober.probe(target, ["q1", "q2"], lambda: time.monotonic() - began > 0.3))
        await asyncio.sleep(0)
        time.sleep(blocked_s)  # noqa: ASYNC251 -- holds this loop: nothing here can send or read a probe
        return await probing

    with embedtext_server([f"tiny={tiny_model_dir}"], args=NULL) as server, Prober() as prober:
        prober.warm_up(server.target, ["q0"])  # the prober's process is up and has called once
        times = asyncio.run(blocked_phase(prober, server.target))
    assert len(times) > MIN_PROBES


def test_probes_keep_their_schedule_while_earlier_ones_wait_open_loop():
    """A slow answer does not hold back the next probe: every probe is sent before the first is
    answered, and each latency counts from its scheduled start (no waits left uncounted)."""
    from embedtext.bench.probes import MIN_PROBES, PROBE_GAP_S, send_probes

    phase = MIN_PROBES + 2  # probes sent before the phase ends; none is answered until then
    events: list[tuple[str, str]] = []

    async def main():
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
    latencies = times
    kinds = [kind for kind, _ in events]
    sent = kinds.count("sent")
    assert sent >= phase and kinds == ["sent"] * sent + ["answered"] * sent  # all sent before the first answer
    assert len(latencies) == sent
    assert [text for kind, text in events if kind == "sent"][:4] == ["q0", "q1", "q2", "q0"]
    # The first probe was answered after the last was sent: counted from its own schedule, its
    # latency holds the whole schedule (a lower bound: sleeps never end early).
    assert max(latencies) >= (sent - 1) * PROBE_GAP_S


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
    with embedtext_server([f"tiny={tiny_model_dir}"], args=NULL) as server:
        began = time.monotonic()
        times, rows, elapsed = asyncio.run(probed_load(server.target, bulk, ["query"], 1, 2.0, prober))
    assert rows >= BULK_ROWS and rows % BULK_ROWS == 0 and times == []
    assert prober.done_at is not None and prober.done_at - began >= elapsed  # not before the call ended
