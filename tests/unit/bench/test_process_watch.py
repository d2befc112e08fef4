"""ProcessWatch counts a process tree's processes apart: a server's engines run in worker processes."""

import os
import subprocess
import sys

from embedtext.bench.measure import ProcessWatch

# Waits for a line, burns 0.2 s of CPU, says so, and stays up until its stdin closes.
CHILD = """import sys, time
sys.stdin.readline()
t = time.process_time()
while time.process_time() - t < 0.2:
    pass
print("done", flush=True)
sys.stdin.readline()
"""


def test_a_child_process_is_counted_apart_from_its_parent():
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        with ProcessWatch({}, {"tree": os.getpid()}) as watch:
            child.stdin.write("go\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "done"
    finally:
        child.stdin.close()
        child.wait()
    children = {name: seconds for name, seconds in watch.cpu_seconds.items() if name.startswith("tree/")}
    assert max(children.values()) >= 0.1, watch.cpu_seconds  # the child's burn, under its own name
    assert watch.peaks["tree"] > 0
