"""bench/gpu/profile_server.py's summary of py-spy's raw stacks (the script itself needs py-spy and
ptrace rights, so it runs on the GPU host, not here)."""

import importlib.util
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
