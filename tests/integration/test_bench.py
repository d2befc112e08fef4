"""``embedtext bench`` end to end, cheaply: the transport suite (NULL ENGINE) at one dim.

No timing asserts: CI machines are noisy; this checks that the suite runs and reports.
"""

import json
import os
import subprocess
import sys


def test_transport_suite_writes_a_report(tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "embedtext.cli", "bench", "--only", "transport", "--rows", "3000", "--dims", "384",
         "--json", str(out), "--workdir", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=180, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert {"hardware", "command", "cases", "ratios", "targets"} <= report.keys()
    assert report["hardware"]["cores"] >= 1 and report["hardware"]["duckdb"]
    cases = {c["name"]: c for c in report["cases"]}
    end_to_end = {"null_engine_udf_bytes_d384", "null_engine_udf_repeated_float_d384", "null_engine_http_json_d384",
                  "null_inprocess_udf_d384"}
    assert cases.keys() == end_to_end | {"wire_bytes_d384", "wire_repeated_float_d384"}
    for case in report["cases"]:
        assert case["suite"] == "transport" and case["rows_per_s"] > 0
    for name in end_to_end:
        case = cases[name]
        assert case["rows"] == 3000 and case["tokens_per_row"] == 10
        assert case["tokens_per_s"] > 0 and case["peak_rss_mb"] > 0
    for key in ("bytes_vs_repeated_float", "bytes_vs_json", "bytes_vs_repeated_float_384", "bytes_vs_json_384",
                "bytes_vs_null_inprocess_384", "wire_bytes_vs_repeated_float"):
        assert isinstance(report["ratios"][key], float) and report["ratios"][key] > 0, key
    target = report["targets"]["bytes_vs_repeated_float"]
    assert target["target"] == 20.0 and isinstance(target["met"], bool)
    assert "NULL ENGINE" in done.stdout or "null_engine" in done.stdout
