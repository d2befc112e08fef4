"""What ps, top and /proc show for our processes and threads (Linux's prctl; elsewhere nothing)."""

from __future__ import annotations

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15


def prctl(option: int, value: int | bytes) -> None:
    """Linux's prctl for the calling thread or process; elsewhere nothing (each caller says what then stands)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux
        pass


def name_this_thread(name: str) -> None:
    """Name the calling thread (/proc/PID/task/TID/comm, at most 15 characters); called on a
    process's main thread it names the process. Not Linux: the name stays as it was."""
    prctl(PR_SET_NAME, name.encode()[:15])
