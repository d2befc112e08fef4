"""The memory a host leaves for the engines: the kernel's MemAvailable, within a memory cgroup's limit.

The cgroup cases write the kernel's files into a folder: this host's own cgroup has no limit to read.
"""

from pathlib import Path

import pytest

from embedtext.server.host.memory import available_memory_bytes

GIB = 1024**3


def _meminfo(tmp_path: Path, available_kib: int) -> Path:
    path = tmp_path / "meminfo"
    path.write_text(f"MemTotal:       32000000 kB\nMemFree:         1000000 kB\nMemAvailable:   {available_kib} kB\n")
    return path


def _cgroups(tmp_path: Path, lines: str) -> Path:
    path = tmp_path / "cgroup"
    path.write_text(lines)
    return path


def _write(folder: Path, **files: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("_", ".", 1)).write_text(text + "\n")


def test_this_hosts_available_memory_is_its_kernels_estimate_at_most():
    fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    total = int(fields["MemTotal"].split()[0]) * 1024
    available = available_memory_bytes()
    assert available is not None and 0 < available <= total


def test_without_a_cgroup_limit_memavailable_counts(tmp_path):
    meminfo = _meminfo(tmp_path, 6 * 1024**2)
    cgroups = _cgroups(tmp_path, "0::/user.slice\n")
    _write(tmp_path / "root/user.slice", memory_max="max", memory_current=str(GIB))
    assert available_memory_bytes(meminfo, tmp_path / "root", cgroups) == 6 * GIB
    assert available_memory_bytes(meminfo, tmp_path / "nowhere", tmp_path / "none") == 6 * GIB


@pytest.mark.parametrize("mounted_at_root", [False, True])
def test_a_cgroup_v2_limit_leaves_its_room(tmp_path, mounted_at_root):
    """A container with 4 GiB of which 1 is used leaves 3, on a host with 6 available."""
    meminfo = _meminfo(tmp_path, 6 * 1024**2)
    cgroups = _cgroups(tmp_path, "0::/docker/abc\n")
    folder = tmp_path / "root" if mounted_at_root else tmp_path / "root/docker/abc"
    _write(folder, memory_max=str(4 * GIB), memory_current=str(GIB))
    assert available_memory_bytes(meminfo, tmp_path / "root", cgroups) == 3 * GIB


def test_a_cgroup_v1_limit_leaves_its_room_and_its_no_limit_is_none(tmp_path):
    meminfo = _meminfo(tmp_path, 6 * 1024**2)
    cgroups = _cgroups(tmp_path, "5:cpu,cpuacct:/x\n4:memory:/job/7\n0::/\n")
    folder = tmp_path / "root/memory/job/7"
    _write(folder, memory_limit_in_bytes=str(2 * GIB), memory_usage_in_bytes=str(GIB // 2))
    assert available_memory_bytes(meminfo, tmp_path / "root", cgroups) == 3 * GIB // 2
    _write(folder, memory_limit_in_bytes="9223372036854771712")  # v1's "no limit"
    assert available_memory_bytes(meminfo, tmp_path / "root", cgroups) == 6 * GIB
    assert available_memory_bytes(tmp_path / "none", tmp_path / "root", cgroups) is None  # no limit, not a huge one


def test_a_host_that_says_neither_gives_none(tmp_path):
    assert available_memory_bytes(tmp_path / "none", tmp_path, tmp_path / "none") is None
