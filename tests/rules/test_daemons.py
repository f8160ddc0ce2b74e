"""The test fixtures' daemons end with the process that started them (tests/support/daemons.py)."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.pg_server import stop_argv
from support.ray_cluster import START_WITHIN, RayCluster

TESTS = Path(__file__).resolve().parents[1]


def starter(code: str) -> tuple[subprocess.Popen, str]:
    """A Python child that runs ``code`` (with this folder importable) and the first line it
    prints: what it started, for the test to kill the child under."""
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(TESTS)},
    )
    return child, child.stdout.readline().strip()  # type: ignore[union-attr]


def test_a_fixture_daemon_ends_when_its_pytest_process_is_killed():
    parent, line = starter(
        "import subprocess, sys, time\n"
        "from support.daemons import die_with_this_process\n"
        "daemon = subprocess.Popen(['sleep', '600'], start_new_session=True,\n"
        "                          preexec_fn=die_with_this_process())\n"
        "print(daemon.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    daemon = int(line)
    try:
        os.kill(daemon, 0)  # alive while its starter lives
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and Path(f"/proc/{daemon}").exists():
            time.sleep(0.05)
        assert not Path(f"/proc/{daemon}").exists(), "the daemon outlived its starter"
    finally:
        parent.kill()
        if Path(f"/proc/{daemon}").exists():
            os.kill(daemon, signal.SIGKILL)


@pytest.mark.timeout(300 + START_WITHIN)  # the start may be tried again, as the fixture's
def test_a_ray_node_and_its_processes_end_when_their_pytest_process_is_killed():
    """``ray start --block`` runs in a session of its own, so a killed test session would
    leave it, its GCS and its raylet running: it gets SIGTERM from the kernel instead, and
    takes its processes with it."""
    parent, line = starter(
        "import sys, time\n"
        "from support.ray_cluster import start_cluster\n"
        "cluster = start_cluster(worker=3, cpus=1, nodes=1)\n"
        "print(cluster.root, flush=True)\n"
        "time.sleep(600)\n"
    )
    root = Path(line)
    cluster = RayCluster(root, 0)
    try:
        assert root.name.startswith("jtray-") and cluster.processes(), "no Ray node came up"
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and cluster.processes():
            time.sleep(0.2)
        assert cluster.processes() == [], "the Ray node outlived its starter"
    finally:
        parent.kill()
        parent.wait()
        for line in cluster.processes():
            os.kill(int(line.split()[0]), signal.SIGKILL)
        if root.name.startswith("jtray-"):
            shutil.rmtree(root, ignore_errors=True)


def _postgres_of(root: Path) -> list[str]:
    """The PostgreSQL processes serving the data folder under ``root``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if f"{root}/data" in cmd:
            found.append(f"{pid} {cmd}")
    return found


def test_a_postgresql_server_ends_when_its_pytest_process_is_killed():
    """``pg_ctl start`` detaches the server from its starter, so a killed test session would
    leave it running and holding its port: a watcher that dies with the starter stops it."""
    from support.pg_server import available

    assert available() is None, available()
    parent, line = starter(
        "import time\n"
        "from support.pg_server import PgServer\n"
        "server = PgServer(3)\n"
        "print(server.root, flush=True)\n"
        "time.sleep(600)\n"
    )
    root = Path(line)
    try:
        assert root.name.startswith("jt-pg-") and _postgres_of(root), "no server came up"
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _postgres_of(root):
            time.sleep(0.2)
        assert _postgres_of(root) == [], "the PostgreSQL server outlived its starter"
    finally:
        parent.kill()
        parent.wait()
        if root.name.startswith("jt-pg-"):
            if _postgres_of(root):
                stop = shlex.join(stop_argv(root / "data"))
                subprocess.run(["su", "postgres", "-s", "/bin/sh", "-c", stop], capture_output=True)
            shutil.rmtree(root, ignore_errors=True)
