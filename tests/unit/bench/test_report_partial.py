"""A bench run writes its report as a long suite goes; a report cut short says so."""

import json

from embedtext.bench.measure import make_case
from embedtext.bench.plan import make_plan
from embedtext.bench.report import make_report, merge_reports, print_report, write_json


def _case(mode: str, rows: int) -> dict:
    fields = dict(rows=rows, seconds=1.0, tokens_per_row=None, mode=mode, workload="scan")
    return make_case(f"mixed_{mode}_scan", "mixed", **fields)


def test_a_report_cut_short_names_its_suite_and_keeps_its_cases(tmp_path, capsys):
    plan = make_plan(True, workdir=str(tmp_path))
    common = dict(plan=plan, suites=["mixed"], command="embedtext bench --only mixed", started=0.0)
    partial = make_report([_case("unpaced", 100)], unfinished="mixed", **common)
    path = tmp_path / "run.json"
    write_json(str(path), partial)
    written = json.loads(path.read_text())
    assert written["unfinished"] == "mixed" and [c["rows"] for c in written["cases"]] == [100]
    print_report(written)
    assert "UNFINISHED: cut short in the mixed suite" in capsys.readouterr().out
    assert merge_reports([str(path)])["unfinished"] == "mixed"

    whole = make_report([_case("unpaced", 100), _case("classes", 90)], **common)
    write_json(str(path), whole)
    assert "unfinished" not in json.loads(path.read_text())
    assert "unfinished" not in merge_reports([str(path)])
