"""bench/gpu/summarize.py: each case's GPU utilisation and host cores come from the samples inside
its window alone, summed per role within a sample and averaged over the window's samples."""

import json
from datetime import datetime


def _smi_time(unix: float) -> str:
    return datetime.fromtimestamp(unix).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]


def test_each_case_reads_only_the_samples_inside_its_window(tmp_path, gpu_script):
    t0 = 1_800_000_000.0
    lines = ["timestamp, utilization.gpu [%], utilization.memory [%], memory.used [MiB], power.draw [W]"]
    # before the case 0 %, inside 80 % then 100 %, after it 0 % again
    for dt, util, watts in ((-4, 0, 80), (1, 80, 500), (3, 100, 700), (9, 0, 80)):
        lines.append(f"{_smi_time(t0 + dt)}, {util} %, 10 %, 1000 MiB, {watts:.2f} W")
    (tmp_path / "gpu-util.csv").write_text("\n".join(lines) + "\n")
    host = [
        (t0 - 2, {"engine 11": 0.1, "host idle": 15.0}),
        (t0 + 2, {"engine 11": 1.0, "engine 12": 0.5, "server 10": 3.0, "host idle": 9.0}),
        (t0 + 4, {"engine 11": 0.8, "engine 12": 0.9, "client 9": 1.0, "host idle": 8.0}),
        (t0 + 8, {"engine 11": 0.0, "server 10": 5.0, "host idle": 10.0}),
    ]
    threads = {"engine 11": 0.9, "engine 12": 0.4, "server 10": 1.0}  # each process's busiest thread
    main = {"engine 11": 0.1, "engine 12": 0.3, "server 10": 0.8}  # and its main thread

    def line(unix, cores):
        present = {"thread": threads, "main": main}
        per_process = {field: {k: v for k, v in table.items() if k in cores} for field, table in present.items()}
        return json.dumps({"t": 0, "unix": unix, "cores": cores, **per_process}) + "\n"

    samples = (line(unix, cores) for unix, cores in host)
    (tmp_path / "host-cpu.jsonl").write_text("".join(samples))
    cases = [
        {"name": "case_a", "tokens_per_s": 1e6, "unix_window": [t0, t0 + 5]},
        {"name": "case_b", "tokens_per_s": 2e6},  # an older report's case: no window, no summary
    ]
    (tmp_path / "gpu-headline-r8.json").write_text(json.dumps({"cases": cases}))
    (tmp_path / "matmul.json").write_text(json.dumps({"device": "cpu"}))

    (summary,) = gpu_script("summarize").summarize(tmp_path)

    assert summary["name"] == "case_a" and summary["run"] == "gpu-headline-r8"
    assert summary["gpu_util_pct"] == 90.0 and summary["gpu_power_w"] == 600.0
    assert summary["samples"] == 2
    # engines 1.5 and 1.7 cores; the server in one sample of two, the client in the other
    assert summary["host_cores"] == {"client": 0.5, "engine": 1.6, "host idle": 8.5, "server": 1.5}
    assert summary["busiest_engine_cores"] == 0.95  # the busiest engine process per sample: 1.0, 0.9
    # the busiest thread of a role, per sample (the max over its processes), averaged like its cores
    assert summary["busiest_thread"] == {"engine": 0.9, "server": 0.5}
    assert summary["main_thread"] == {"engine": 0.3, "server": 0.4}
    assert summary["limit"] == "engine thread"  # GPU 90%: an engine's loop at 0.9 of a core bound it
    assert json.loads((tmp_path / "summary.json").read_text()) == [summary]


def test_the_limit_is_the_first_bound_that_holds(gpu_script):
    limit = gpu_script("summarize").limit
    case = dict(gpu_util_pct=60.0, busiest_thread={"engine": 0.5, "server": 0.95}, busiest_engine_cores=0.5)
    case["host_cores"] = {"host idle": 4.0}
    assert limit(case) == "server thread"
    assert limit(case | dict(gpu_util_pct=97.0)) == "gpu"
    idle = case | dict(busiest_thread={"engine": 0.5})
    assert limit(idle) == "none saturated"
    assert limit(idle | dict(host_cores={"host idle": 0.2})) == "host cores"
    # an older run's samples: processes only
    assert limit(idle | dict(busiest_thread={}, busiest_engine_cores=1.03)) == "engine process"


class _Process:
    """Stand-in for psutil.Process: only the name and command line the sampler reads."""

    def __init__(self, *cmdline: str) -> None:
        self._cmdline = list(cmdline)

    def name(self) -> str:
        return "python"

    def cmdline(self) -> list[str]:
        return self._cmdline


def test_the_probe_process_is_an_engine_and_the_suite_a_client(gpu_script):
    sampler = gpu_script("sample_cpu")
    assert sampler.role(_Process("python", "bench/gpu/packed_overlap.py", "work", "out.json")) == "engine"
    assert sampler.role(_Process("embedtext", "bench", "--only", "gpu")) == "client"
    assert sampler.role(_Process("python", "-m", "embedtext.server", "serve")) == "server"
