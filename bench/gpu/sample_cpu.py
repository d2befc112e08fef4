"""Each process's host CPU, every few seconds, as JSON lines: which process the host work of a GPU run sits in.

    python bench/gpu/sample_cpu.py --every 2 > host-cpu.jsonl    # until killed

A line: {"t": seconds since start, "unix": the time, "cores": {"<role> <pid>": cores used since the
last line}, "thread": {"<role> <pid>": the busiest thread's share of a core}, "main": {"<role> <pid>":
the main thread's (a server's event loop)}}, for the processes of this run that used any, and the
host's idle. A thread near 1.0 is a serial part that caps its process (an event loop, an engine's
step loop). bench/gpu/summarize.py reads it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import psutil

OURS = ("embedtext", "vllm", "VLLM", "replica-worker", "query-worker", "python")


def _ours(proc: psutil.Process) -> bool:
    try:
        return any(word in " ".join(proc.cmdline()[:4]) or word in proc.name() for word in OURS)
    except psutil.Error:
        return False


# (what the command line holds, the role it names), first match wins
ROLES = (
    ("replica-worker", "engine"),
    ("query-worker", "engine"),
    ("VLLM::EngineCore", "vllm-engine"),
    ("vllm.entrypoints", "vllm-api"),
    ("embedtext.server", "server"),
    ("packed_overlap", "engine"),  # the probe: its engine runs in its own process
    ("bench", "client"),
)


def role(proc: psutil.Process) -> str:
    """What a process is in the run, from its command line: server, engine, client, vllm-api, ..."""
    line = " ".join([proc.name(), *proc.cmdline()[:6]])
    return next((name for word, name in ROLES if word in line), proc.name())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--every", type=float, default=2.0)
    args = parser.parse_args()
    started = last = time.monotonic()
    seen: dict[int, float] = {}
    seen_threads: dict[tuple[int, int], float] = {}
    idle_before = psutil.cpu_times().idle
    while True:
        time.sleep(args.every)
        now = time.monotonic()
        cores: dict[str, float] = {}
        busiest: dict[str, float] = {}
        main_thread: dict[str, float] = {}
        # This sample's processes and threads only: those that ended drop out.
        alive: dict[int, float] = {}
        alive_threads: dict[tuple[int, int], float] = {}
        for proc in psutil.process_iter():
            if proc.pid == os.getpid() or not _ours(proc):
                continue
            try:
                times = proc.cpu_times()
                total = times.user + times.system
                name = f"{role(proc)} {proc.pid}"
                threads = {t.id: t.user_time + t.system_time for t in proc.threads()}
            except psutil.Error:
                continue
            before = seen.get(proc.pid, total)
            alive[proc.pid] = total
            if total > before:
                cores[name] = round((total - before) / (now - last), 2)
                spent = {tid: used - seen_threads.get((proc.pid, tid), used) for tid, used in threads.items()}
                busiest[name] = round(max(spent.values(), default=0.0) / (now - last), 2)
                main_thread[name] = round(spent.get(proc.pid, 0.0) / (now - last), 2)
            alive_threads.update(((proc.pid, tid), used) for tid, used in threads.items())
        seen, seen_threads = alive, alive_threads
        idle = psutil.cpu_times().idle
        cores["host idle"] = round((idle - idle_before) / (now - last), 2)
        idle_before, last = idle, now
        line = {"t": round(now - started, 1), "unix": round(time.time(), 2), "cores": cores}
        line |= {"thread": busiest, "main": main_thread}
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    sys.exit(main())
