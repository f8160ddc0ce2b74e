"""A workspace over the network: a store on a real network filesystem (sshfs, served by an
sshd in a network namespace) refuses SQLite and works with a PostgreSQL index; and eight
submitters in two network namespaces, sharing one store folder and one PostgreSQL index,
neither lose nor duplicate a run."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support.made_runs import finish, new_run
from support.pg_server import PgServer
from support.slurm_cluster import worker_index
from support.ssh_netns import netns_hosts  # noqa: F401 (fixture)

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import StoreError
from jupyter_trainer.store import Store
from jupyter_trainer.store.filesystems import filesystem_of, network_filesystem

SUBMIT = """
import json, os, sys, time
from jupyter_trainer.core.spec import CodeSpec, RunSpec
from jupyter_trainer.store import Store
made = []
for i in range(int(sys.argv[2])):
    store = Store()
    snapshot = store.staging_dir()
    snapshot.mkdir()
    (snapshot / "train.py").write_text(f"print({i})")
    spec = RunSpec(name=f"{sys.argv[1]}-{i}", code=CodeSpec(entry="train.py", hash="sha256:0"))
    run_id = store.create(spec, snapshot)
    state = json.loads(store.paths(run_id).state.read_text())
    store.write_state(run_id, {**state, "status": "running"})
    store.write_state(run_id, {**state, "status": "completed", "ended": time.time()})
    made.append(run_id)
print(json.dumps(made))
"""


@pytest.fixture
def sshfs_mount(netns_hosts):
    """A folder of this machine, mounted over sshfs from the sshd of namespace host a1."""
    exported = Path(tempfile.mkdtemp(prefix="jt-export-"))
    point = Path(tempfile.mkdtemp(prefix="jt-sshfs-"))
    key = netns_hosts.root / "client_key"
    subprocess.run(
        [
            "sshfs",
            f"root@{netns_hosts.addresses[0]}:{exported}",
            str(point),
            "-o",
            f"IdentityFile={key},StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    try:
        yield point
    finally:
        subprocess.run(["fusermount3", "-u", str(point)], check=False, capture_output=True)
        subprocess.run(["umount", "-l", str(point)], check=False, capture_output=True)
        point.rmdir()
        subprocess.run(["rm", "-rf", str(exported)], check=False)


def test_a_store_on_a_network_filesystem_refuses_sqlite_and_takes_postgresql(
    sshfs_mount, pg_url, monkeypatch, tmp_path
):
    home = sshfs_mount / "team"
    assert filesystem_of(home) == (str(sshfs_mount), "fuse.sshfs")
    assert network_filesystem(home) == "fuse.sshfs" and network_filesystem(tmp_path) is None
    monkeypatch.setenv("JUPYTER_TRAINER_HOME", str(home))
    store = Store(home)
    with pytest.raises(StoreError) as refused:
        new_run(store, "on-nfs")
    assert "is on fuse.sshfs, a network filesystem" in str(refused.value)
    assert "JUPYTER_TRAINER_INDEX=postgresql://" in str(refused.value)
    assert not (home / "runs.db").exists() and not list((home / "runs").iterdir())
    monkeypatch.setenv("JUPYTER_TRAINER_INDEX", pg_url)
    store = Store(home)
    run_id = new_run(store, "on-nfs")
    finish(store, run_id)
    assert [r["id"] for r in store.list_runs()] == [run_id]
    assert not api.doctor(home=home, hashes=False).unresolved
    store.delete(run_id)  # the mount goes before the home fixture looks for leftovers


def test_eight_submitters_in_two_namespaces_lose_and_duplicate_nothing(
    netns_hosts,
    tmp_path,
    worker_id,
    monkeypatch,
):
    bridge = f"10.200.{netns_hosts.k}.1"
    server = PgServer(worker_index(worker_id), listen=bridge, trust=f"10.200.{netns_hosts.k}.0/24")
    try:
        url = server.new_database().replace("127.0.0.1", bridge)
        home = tmp_path / "shared-workspace"
        env = {
            "JUPYTER_TRAINER_HOME": str(home),
            "JUPYTER_TRAINER_INDEX": url,
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        }
        per = 5
        procs = [
            subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    netns_hosts.names[i % 2],
                    sys.executable,
                    "-c",
                    SUBMIT,
                    f"s{i}",
                    str(per),
                ],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(8)
        ]
        made = []
        for proc in procs:
            out, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, err
            made.extend(json.loads(out))
        assert len(made) == 8 * per == len(set(made))
        monkeypatch.setenv("JUPYTER_TRAINER_INDEX", url)
        store = Store(home)
        rows = store.list_runs(limit=1000)
        assert sorted(r["id"] for r in rows) == sorted(made)
        assert {r["status"] for r in rows} == {"completed"}
        assert sorted(store.run_ids_on_disk()) == sorted(made)
        report = api.doctor(home=home, hashes=False)
        assert not report.findings, report.text()
    finally:
        server.stop()
