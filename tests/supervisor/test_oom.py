"""A rank the kernel's out-of-memory killer ends is named as out of memory, with its cgroup's
limit and the peaks, never just "killed by SIGKILL"; on this machine and on ssh nodes.

The memory cgroup is a real one with a 192 MiB limit (cgroup v1's memory hierarchy here, v2
where that is what the machine has); rank 1 moves itself into it, as if it had started
there (a Slurm job's cgroup, a container's), and then writes 1 GiB.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import RunFailed

LIMIT = 192 << 20

GREEDY = """
import os, time
from jupyter_trainer import runtime as jt
if jt.rank == 1:
    with open(os.path.join({cgroup!r}, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(1.5)  # its watcher looks at its cgroup twice a second
    block = bytearray(1 << 30)
    for i in range(0, len(block), 4096):
        block[i] = 1
time.sleep(60)
"""


def _v2() -> bool:
    return Path("/sys/fs/cgroup/cgroup.controllers").exists()


@pytest.fixture
def limited_cgroup():
    """A memory cgroup limited to LIMIT, without swap; removed at the end."""
    root = Path("/sys/fs/cgroup") if _v2() else Path("/sys/fs/cgroup/memory")
    folder = root / f"jt-oom-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    try:
        if _v2():
            (folder / "memory.max").write_text(str(LIMIT))
            (folder / "memory.swap.max").write_text("0")
        else:
            (folder / "memory.limit_in_bytes").write_text(str(LIMIT))
            swap = folder / "memory.memsw.limit_in_bytes"
            if swap.exists():
                swap.write_text(str(LIMIT))
        yield folder
    finally:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                folder.rmdir()
                break
            except OSError:  # a process is still being reaped out of it
                time.sleep(0.2)
        assert not folder.exists(), f"cgroup {folder} left: {(folder / 'cgroup.procs').read_text()}"


def check_oom(run: api.Run, folder: Path) -> None:
    with pytest.raises(RunFailed):
        run.wait(timeout=120)
    state = run.state
    assert state["failed_rank"] == 1, state
    name = "/" + folder.name
    error = state["error"]
    assert error.startswith(
        f"rank 1 was killed by the out-of-memory killer (SIGKILL): its memory cgroup "
        f"{name} reached its limit of 192.0 MiB (peak "
    ), error
    assert "see logs/rank-1.log, and give it more memory or use less" in error
    oom = run.store.rank_records(run.id)[1]["oom"]
    assert oom["cgroup"] == name and oom["limit_bytes"] == LIMIT, oom
    assert 0.9 * LIMIT <= oom["peak_bytes"] <= LIMIT, oom


def test_a_rank_out_of_its_cgroups_memory_is_named(home, limited_cgroup):
    run = api.submit(GREEDY.format(cgroup=str(limited_cgroup)), procs=2, name="greedy")
    check_oom(run, limited_cgroup)


def test_an_ssh_rank_out_of_its_cgroups_memory_is_named(pair, home, limited_cgroup):
    run = api.submit(
        GREEDY.format(cgroup=str(limited_cgroup)), target="pair", nodes=2, name="greedy-ssh"
    )
    check_oom(run, limited_cgroup)
