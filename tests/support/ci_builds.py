"""What .ci/run builds in the background while the tests already run (the DuckDB extension, the
extra vLLM environments): a test that needs one waits for it here (on the tests' path: test
folders are not packages). Elsewhere, where EMBEDTEXT_CI_BUILDS is not set, nothing is waited for.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

WAIT_S = 1800  # a cold install of a vLLM environment on a 2-core host takes minutes


def wait_for_build(name: str) -> None:
    """Wait until .ci/run's background build ``name`` has ended (``NAME.done`` under
    EMBEDTEXT_CI_BUILDS: its exit status, then its log's tail), and fail with that log if it failed."""
    folder = os.environ.get("EMBEDTEXT_CI_BUILDS")
    if not folder:
        return
    done = Path(folder) / f"{name}.done"
    deadline = time.monotonic() + WAIT_S
    while not done.exists():
        assert time.monotonic() < deadline, f"CI's background build {name!r} did not end within {WAIT_S} s"
        time.sleep(1)
    status, _, log = done.read_text().partition("\n")
    assert status.strip() == "0", f"CI's background build {name!r} failed (exit {status.strip()}):\n{log}"
