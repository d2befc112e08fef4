"""How much memory this host leaves for the engines: the kernel's estimate, within the cgroup's limit.

A container's limit is not in /proc/meminfo, which shows the whole machine's memory; the cgroup's
own files hold it (v2: ``memory.max``, v1: ``memory/memory.limit_in_bytes``).
"""

from __future__ import annotations

from pathlib import Path

# What one stepped vLLM-CPU engine's worker takes beside its model's weights (torch, vLLM, compiled
# kernels), with a quarter for margin (measured by the mixed suite's cores_used: docs/tuning.md).
CPU_ENGINE_BYTES = 3 * 1024**3 // 2


def available_memory_bytes(
    meminfo: Path = Path("/proc/meminfo"),
    cgroup_root: Path = Path("/sys/fs/cgroup"),
    own_cgroups: Path = Path("/proc/self/cgroup"),
) -> int | None:
    """Bytes this process's children may still take: MemAvailable, or less where a memory cgroup
    limits them. None where the host says neither (not Linux)."""
    available = _meminfo_available(meminfo)
    room = _cgroup_room(cgroup_root, own_cgroups)
    known = [b for b in (available, room) if b is not None]
    return min(known) if known else None


def _meminfo_available(meminfo: Path) -> int | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_room(root: Path, own_cgroups: Path) -> int | None:
    """The limit less the usage of this process's memory cgroup (v2 or v1); None without a limit."""
    try:
        lines = own_cgroups.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:
            directory, limit, usage = "", "memory.max", "memory.current"
        elif "memory" in controllers.split(","):
            directory, limit, usage = "memory", "memory.limit_in_bytes", "memory.usage_in_bytes"
        else:
            continue
        # Inside a container the cgroup's own directory is often mounted at the root itself.
        for folder in (root / directory / path.lstrip("/"), root / directory):
            room = _room_in(folder, limit, usage)
            if room is not None:
                return room
    return None


def _room_in(folder: Path, limit_file: str, usage_file: str) -> int | None:
    try:
        limit_text = (folder / limit_file).read_text().strip()
        usage = int((folder / usage_file).read_text().strip())
    except (OSError, ValueError):
        return None
    if limit_text == "max":
        return None
    limit = int(limit_text)
    if limit >= 2**62:  # v1 writes "no limit" as a page-rounded 2**63 - 1
        return None
    return max(limit - usage, 0)
