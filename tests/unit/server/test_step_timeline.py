"""The step timeline's garbage-collection clock: a collection during a batch's time in the worker
shows in its line, and none shows as 0."""

import gc
import json

from embedtext.server.engine.step_timeline import StepTimeline


def test_a_batch_line_counts_the_collections_during_its_time(tmp_path):
    path = tmp_path / "steps.jsonl"
    timeline = StepTimeline(str(path), "m/0")
    enabled = gc.isenabled()
    gc.disable()  # no collection but the one below
    try:
        collected = timeline.batch_times(arrived=1.0)
        garbage = [[i] for i in range(50_000)]
        for item in garbage:
            item.append(item)  # cycles: the collection has work to do
        del garbage, item
        gc.collect()
        collected.delivered = 1.01
        timeline.write(1, 1, collected, settled=1.02)
        quiet = timeline.batch_times(arrived=2.0)
        quiet.delivered = 2.01
        timeline.write(1, 1, quiet, settled=2.02)
    finally:
        if enabled:
            gc.enable()
        timeline.close()
    first, second = (json.loads(line) for line in path.read_text().splitlines())
    assert first["gc_ms"] > 0 and second["gc_ms"] == 0
    assert timeline.gc._callback not in gc.callbacks  # closed: the clock stops


def test_older_timelines_without_the_gc_field_still_read(tmp_path):
    from embedtext.bench.step_timeline import timeline_parts

    line = {"waited_ms": 1.0, "step_ms": 2.0, "step_rows": 1, "step_bulk_rows": 0, "to_loop_ms": 0.1, "worker_ms": 3.2}
    count, parts = timeline_parts([line, line | {"gc_ms": 0.0}])
    assert count == 2 and "gc_ms" not in parts and parts["step_ms"] == (2.0, 2.0)
    assert timeline_parts([line | {"gc_ms": 4.0}])[1]["gc_ms"] == (4.0, 4.0)
