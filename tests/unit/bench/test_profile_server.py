"""bench/gpu/profile_server.py's summary of py-spy's raw stacks (the script itself needs py-spy and
ptrace rights, so it runs on the GPU host, not here)."""

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "gpu" / "profile_server.py"


def _script():
    spec = importlib.util.spec_from_file_location("profile_server", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_summary_ranks_each_thread_s_frames_by_share_leaving_out_its_entry(tmp_path):
    raw = tmp_path / "bulk-worker0.raw"
    raw.write_text(
        "thread (7): steps;run (a.py:1);step (b.py:2);forward (c.py:3) 60\n"
        "thread (7): steps;run (a.py:1);step (b.py:2);add_request (d.py:4) 30\n"
        "thread (7): steps;run (a.py:1);wait (e.py:5) 10\n"
        "thread (8): MainThread;select (f.py:6) 20\n"
    )
    summary = _script().top_frames(raw)
    assert list(summary) == ["thread (7): steps", "thread (8): MainThread"]  # busiest first
    steps = summary["thread (7): steps"]
    # "run" is in every sample: the thread's entry, left out; "step" holds forward and add_request.
    assert steps["inside"] == [(90.0, "step"), (60.0, "forward"), (30.0, "add_request"), (10.0, "wait")]
    assert steps["leaves"] == [(60.0, "forward"), (30.0, "add_request"), (10.0, "wait")]
    assert summary["thread (8): MainThread"] == {"inside": [], "leaves": [(100.0, "select")]}


def test_the_step_timeline_of_a_phase_is_split_into_its_parts(tmp_path):
    from embedtext.bench.step_timeline import read_timeline, timeline_parts

    steps = tmp_path / "steps.jsonl"
    line = {"replica": "m/0", "rows": 1, "interactive_rows": 1, "steps": 1, "step_tokens": 12, "to_loop_ms": 0.5}
    lines = [
        {**line, "at": 100.0, "waited_ms": 50.0, "step_ms": 50.0, "step_rows": 9, "step_bulk_rows": 8},  # before
        *(
            {**line, "at": 200.0 + i, "waited_ms": float(i), "step_ms": 2.0 * i, "step_rows": i, "step_bulk_rows": 0}
            | {"worker_ms": 3.0 * i + 0.5}
            for i in range(1, 101)
        ),
    ]
    lines[0] |= {"worker_ms": 100.5}
    steps.write_text("".join(json.dumps(one) + "\n" for one in lines))
    batches, parts = timeline_parts(read_timeline(steps, since=150.0, until=400.0))
    assert batches == 100
    assert parts["waited_ms"] == (50.0, 99.0) and parts["step_ms"] == (100.0, 198.0)
    assert parts["to_loop_ms"] == (0.5, 0.5) and parts["worker_ms"] == (150.5, 297.5)
    said = _script().timeline_line("bulk", batches, parts)
    assert said.startswith("bulk: in the engine (100 batches") and "the running step 50 / 99" in said
    assert read_timeline(tmp_path / "none.jsonl", 0.0, 1e12) == [] and timeline_parts([]) == (0, {})
    assert "no step timeline" in _script().timeline_line("idle", 0, {})
