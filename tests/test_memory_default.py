"""The memory limit a night takes when none is set (flows.resources.machine_limit), read
from /proc/meminfo and the cgroup files given as fixture text."""

from __future__ import annotations

from pathlib import Path

from flows.resources import MIN_LIMIT, cgroup_files, machine_limit, mem_available, night_limit

MEMINFO = """MemTotal:       32795276 kB
MemFree:         1234567 kB
MemAvailable:   16777216 kB
Buffers:          123456 kB
"""
V2 = "0::/system.slice/runner.service\n"
V1 = "12:pids:/\n4:memory:/docker/abc\n1:name=systemd:/docker/abc\n"
ROOT = Path("/sys/fs/cgroup")


def machine(files: dict[str, str]):
    def read(path) -> str:
        try:
            return files[str(path)]
        except KeyError:
            raise FileNotFoundError(path) from None
    return machine_limit(read)


def test_meminfo_and_cgroup_text_parse():
    assert mem_available(MEMINFO) == 16 << 30
    assert mem_available("MemTotal: 1 kB\n") is None
    assert cgroup_files(V2) == [ROOT / "system.slice/runner.service/memory.max", ROOT / "system.slice/memory.max",
                                ROOT / "memory.max"]
    assert cgroup_files(V1) == [ROOT / "memory/docker/abc/memory.limit_in_bytes", ROOT / "memory/docker/memory.limit_in_bytes",
                                ROOT / "memory/memory.limit_in_bytes"]


def test_half_of_mem_available_without_a_cgroup_limit():
    files = {"/proc/meminfo": MEMINFO, "/proc/self/cgroup": V2, str(ROOT / "memory.max"): "max\n"}
    assert machine(files) == (8 << 30, "8.0 GiB (50% of MemAvailable, 16.0 GiB)")


def test_the_lowest_cgroup_limit_on_the_way_up_holds_when_smaller():
    files = {"/proc/meminfo": MEMINFO, "/proc/self/cgroup": V2,
             str(ROOT / "system.slice/runner.service/memory.max"): "max\n",
             str(ROOT / "system.slice/memory.max"): f"{4 << 30}\n", str(ROOT / "memory.max"): f"{6 << 30}\n"}
    assert machine(files) == (2 << 30, "2.0 GiB (50% of the cgroup memory limit, 4.0 GiB)")
    v1 = {"/proc/meminfo": MEMINFO, "/proc/self/cgroup": V1,
          str(ROOT / "memory/docker/abc/memory.limit_in_bytes"): f"{3 << 30}\n",
          str(ROOT / "memory/memory.limit_in_bytes"): "9223372036854771712\n"}
    assert machine(v1)[0] == 3 << 29


def test_never_below_the_minimum_and_a_set_limit_is_kept():
    tiny = {"/proc/meminfo": "MemAvailable:   102400 kB\n", "/proc/self/cgroup": V2}
    assert machine(tiny)[0] == MIN_LIMIT
    assert machine({})[0] == 2 << 30  # nothing readable: the 2 GiB the batches are sized for
    assert night_limit(3 << 30) == (3 << 30, "3.0 GiB (set)")
