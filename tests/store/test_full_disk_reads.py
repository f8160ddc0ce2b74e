"""On a full disk, the commands that only read the store still read it, and what cannot
be done says that the disk is full, not that something must be made writable."""

from __future__ import annotations

import errno
import os
import subprocess
import time

import pytest
from conftest import wait_for
from support.jt_cli import cli

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import StoreError
from jupyter_trainer.rankside.host import procs
from jupyter_trainer.store import Store


@pytest.fixture
def tiny_home(home):
    """``home`` on a 4 MiB tmpfs of its own, unmounted at the end."""
    home.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(home)], check=True)
    try:
        yield home
    finally:
        deadline = time.monotonic() + 30
        while subprocess.run(["umount", str(home)], capture_output=True).returncode:
            if time.monotonic() > deadline:
                subprocess.run(["umount", "-l", str(home)], check=True)
                break
            time.sleep(0.2)


def fill(path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * (1 << 16))
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)


def test_runs_and_doctor_on_a_full_disk(tiny_home):
    run = api.submit("print('hi')\n", launcher="python", hot=False, name="before", wait=True)
    supervisor = run.state["supervisor"]
    wait_for(
        lambda: not procs.is_alive(supervisor["pid"], supervisor["start_ticks"]),
        timeout=30,
        what="the supervisor to exit",
    )
    fill(tiny_home / "filler")
    listed = cli("runs")
    assert "writable" not in listed.stderr, listed.stderr
    assert listed.returncode == 0 and run.id in listed.stdout, (listed.stdout, listed.stderr)
    checked = cli("doctor")
    assert "Traceback" not in checked.stderr and "writable" not in checked.stderr, checked.stderr
    assert checked.returncode == 0 and "1 run checked" in checked.stdout, checked.stdout
    with pytest.raises(StoreError, match="the disk is full; free some space") as refused:
        Store(tiny_home).index.check_writable()  # a write says why it cannot be done
    assert "writable" not in str(refused.value)
