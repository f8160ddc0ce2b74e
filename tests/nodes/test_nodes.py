"""The node layer through a transport that is not ssh: the real agent on this machine,
reached by ``LocalShell`` and by a transport written here against the ``NodeShell``
protocol alone (as a Ray actor or a scheduler's shell would be)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jupyter_trainer.core.errors import TargetError
from jupyter_trainer.nodes import calls
from jupyter_trainer.nodes.commands import agent_file
from jupyter_trainer.nodes.folder import RemoteFolder
from jupyter_trainer.nodes.mirror import LocalFiles
from jupyter_trainer.nodes.prepare import snapshot_tarball
from jupyter_trainer.nodes.ssh import SshClient
from jupyter_trainer.nodes.transport import LocalShell, NodeShell
from jupyter_trainer.rankside.agent import follow as agent_follow
from jupyter_trainer.rankside.agent.snapshot import tree_hash
from jupyter_trainer.rankside.host import procs
from jupyter_trainer.targets import BuiltEnvironment


@dataclass
class EnvShell:
    """A transport of its own: every command goes through ``env -i PATH=...`` in a shell,
    and it counts what it ran. Implements NodeShell without inheriting anything."""

    host: str = "envnode"
    ran: int = 0
    tmpdir: str | None = None  # the node's TMPDIR, when it has one

    def _argv(self, remote: str) -> list[str]:
        temp = [f"TMPDIR={self.tmpdir}"] if self.tmpdir else []
        return ["env", "-i", "PATH=/usr/bin:/bin", *temp, "/bin/sh", "-c", remote]

    def run(
        self,
        remote_command: str,
        *,
        input: bytes | None = None,
        timeout: float = 60.0,
        what: str = "a command",
    ) -> subprocess.CompletedProcess:
        self.ran += 1
        return subprocess.run(
            self._argv(remote_command), input=input, capture_output=True, timeout=timeout
        )

    def popen(self, remote_command: str, **kwargs: Any) -> subprocess.Popen:
        self.ran += 1
        return subprocess.Popen(self._argv(remote_command), **kwargs)

    def resolve(self) -> dict[str, list[str]]:
        return {"hostname": [self.host]}

    def close(self) -> None:
        pass


def test_the_transports_satisfy_the_protocol():
    assert isinstance(SshClient("gpu1", "/tmp/c"), NodeShell)
    assert isinstance(LocalShell(), NodeShell)
    assert isinstance(EnvShell(), NodeShell)
    assert not isinstance(object(), NodeShell)


def test_a_call_that_outlives_its_timeout_names_the_node_and_the_call():
    with pytest.raises(TargetError, match=r"^node localhost: pinging did not finish within 1 s$"):
        LocalShell().run("sleep 5", timeout=1, what="pinging")


@pytest.mark.parametrize("shell", [LocalShell(), EnvShell()], ids=["local", "own"])
def test_preflight_installs_the_agent_through_any_transport(shell, tmp_path):
    workdir = tmp_path / "w d"
    answer = calls.preflight(
        shell,
        sys.executable,
        str(workdir),
        {
            "modules": ["json", "no_such_module_jt"],
            "versions": [],
            "snapshot": "sha256-00",
            "tools": ["sh"],
            "port": True,
        },
        60,
    )
    assert answer["workdir"] == str(workdir)
    # the rendezvous port: below the kernel's ephemeral range, where no outgoing connection
    # (nor a client's connection to itself) can take it before the store binds it
    low, _ = procs.ephemeral_ports()
    assert low // 2 <= answer["port"] < low, answer["port"]
    assert answer["missing"] == ["no_such_module_jt"]
    assert answer["tools"]["sh"]
    assert (workdir / "bin" / answer["agent"].rsplit("/", 1)[-1]).is_file()
    assert getattr(shell, "ran", 1) == 1


def test_a_missing_interpreter_is_named_with_the_fix(tmp_path):
    with pytest.raises(TargetError, match="interpreter /nonexistent/python was not found"):
        calls.preflight(EnvShell(), "/nonexistent/python", str(tmp_path), {}, 30)


def test_a_remote_folder_goes_through_its_whole_lifecycle_on_another_transport(tmp_path):
    """Pre-flight, stage (then found intact), start a launcher, follow its files, finish
    through the follow session, collect outputs, hash the snapshot, discard: the real agent,
    reached only through the NodeShell protocol."""
    code = tmp_path / "code"
    (code / "_jt").mkdir(parents=True)
    (code / "train.py").write_text("print('hi')\n")
    local = tmp_path / "local-run"
    (local / "logs").mkdir(parents=True)
    shell = EnvShell()
    folder = RemoteFolder(
        shell,
        sys.executable,
        str(tmp_path / "node w"),
        LocalFiles(str(local)),
        timeout=10,
        lost_after=30,
    )
    args = {"modules": [], "versions": [], "tools": []}
    code_hash = tree_hash(str(code))
    folder.preflight("r1", code_hash, args)
    assert folder.problem() is None and not folder.has_snapshot
    folder.stage(snapshot_tarball(code))
    copy = tmp_path / "node w" / "snapshots" / folder.snapshot
    (copy / "train.py").write_text("changed by a run\n")
    folder.preflight("r1", code_hash, args)  # a changed copy is set aside, never reused
    assert not folder.has_snapshot and ".changed-" in folder.set_aside
    folder.stage(snapshot_tarball(code))
    folder.preflight("r1", code_hash, args)
    assert folder.has_snapshot and folder.set_aside is None
    assert folder.run_dir == f"{tmp_path}/node w/runs/r1"

    script = (
        "import os\nopen('logs/rank-0.log', 'w').write('hello\\n')\n"
        "open('outputs/w.txt', 'w').write('42')\n"
    )
    started = folder.start(
        {
            "run_dir": folder.run_dir,
            "snapshot": folder.snapshot,
            "node": 0,
            "files": {"spec.json": "{}"},
            "orphan_timeout": 60,
            "argv": [sys.executable, "-c", script],
            "env": {"JT_RUN_ID": "r1"},
            "env_defaults": {},
            "path_prepend": [],
            "cwd": folder.run_dir,
        },
        "starting the launcher",
    )
    assert started["pid"] > 0
    follower = folder.follow()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (
            follower.status.get("exit") != 0 or not (local / "logs/rank-0.log").exists()
        ):
            folder.pump()
            time.sleep(0.05)
        assert follower.status.get("exit") == 0
        assert (local / "logs/rank-0.log").read_text() == "hello\n"
        assert folder.request_finish({"run_id": "r1", "grace": 0.5, "outputs": True})
        answer, _ = folder.await_finish(30)
    finally:
        folder.stop_following()
    assert answer["leftovers"] == []
    assert folder.collect()["outputs"] == ["w.txt"]
    assert (local / "outputs/w.txt").read_text() == "42"
    where, digest = folder.snapshot_hash()
    assert (where, digest) == (f"envnode:{copy}", code_hash)
    (Path(folder.run_dir) / "work" / "node-0").mkdir(parents=True)
    assert folder.discard() == [f"envnode:{folder.run_dir}/work"]
    assert not (Path(folder.run_dir) / "work").exists()


def test_the_pre_flight_installs_the_agent_zip_and_reports_its_path(tmp_path):
    workdir = tmp_path / "node"
    args = {"modules": ["json"], "versions": [], "tools": []}
    answer = calls.preflight(EnvShell(), sys.executable, str(workdir), args, 30)
    (installed,) = (workdir / "bin").iterdir()
    assert installed.name == agent_file(hashlib.sha256(calls.agent_source()).hexdigest())
    assert installed.read_bytes() == calls.agent_source()
    assert answer["agent"] == str(installed) and answer["missing"] == []


def test_a_dry_run_pre_flight_leaves_no_file_behind(tmp_path):
    """The probe runs the agent's zip from a private temporary file and removes it, when the
    agent answers and when it fails; the workdir is never made."""
    temp, workdir = tmp_path / "tmp", tmp_path / "node"
    temp.mkdir()
    shell = EnvShell(tmpdir=str(temp))
    args = {"modules": ["json", "no_such_module"], "versions": [], "tools": []}
    answer = calls.preflight(shell, sys.executable, str(workdir), args, 30, probe=True)
    assert answer["missing"] == ["no_such_module"] and answer["writable"]
    assert Path(answer["agent"]).parent == temp and answer["agent"].endswith(".pyz")
    assert list(temp.iterdir()) == [] and not workdir.exists()
    with pytest.raises(TargetError, match="pre-flight"):  # the agent fails: a traceback
        calls.preflight(shell, sys.executable, str(workdir), {"modules": 5}, 30, probe=True)
    assert list(temp.iterdir()) == [] and not workdir.exists()


def test_built_environment_records_what_the_run_state_keeps():
    ssh_like = BuiltEnvironment(
        "/e/bin/python",
        env_id="e1",
        python_version="3.11.7",
        torch="2.13.0",
        built=True,
        build_seconds=2.5,
        nodes={"n1": {"python": "/e/bin/python", "built": True}},
    )
    assert ssh_like.record() == {
        "python": "/e/bin/python",
        "env_id": "e1",
        "python_version": "3.11.7",
        "torch": "2.13.0",
        "built": True,
        "build_seconds": 2.5,
        "built_at": None,
        "nodes": {"n1": {"python": "/e/bin/python", "built": True}},
    }
    assert BuiltEnvironment("/p", on="login").record()["on"] == "login"
    assert "nodes" not in BuiltEnvironment("/p").record()


def test_a_launcher_that_ends_while_its_status_is_read_is_not_taken_for_lost(tmp_path, monkeypatch):
    """The keeper records the launcher's exit and then ends. A status read that finds no exit
    yet and then both processes gone looks at the exit record again, instead of reporting a
    lost launcher (exit -1, which the supervisor took for a SIGHUP)."""

    (tmp_path / "node-0.json").write_text(json.dumps({"pid": 2**22 + 1, "keeper": 2**22 + 2}))

    def keeper_finishes_now(pid, ticks=None):  # the keeper writes the exit record, then is gone
        (tmp_path / "node-0.exit").write_text(json.dumps({"exit_code": 0}))
        return False

    monkeypatch.setattr(agent_follow, "is_alive", keeper_finishes_now)
    assert agent_follow.Follower(str(tmp_path), 0, {}).launcher_status() == {
        "exit": 0,
        "alive": False,
    }
    (tmp_path / "node-0.exit").unlink()
    monkeypatch.setattr(agent_follow, "is_alive", lambda pid, ticks=None: False)
    assert agent_follow.Follower(str(tmp_path), 0, {}).launcher_status()["exit"] == -1


def test_an_older_read_of_a_record_from_another_node_never_replaces_a_newer_one(tmp_path):
    """Nodes that share a filesystem (ssh hosts on one NFS home, a Slurm cluster) each follow
    the same rank records. A node that read rank 1's record before its rank wrote its end
    may be heard after the node that read the end: the older read must not win, or the run
    is judged on a record that says rank 1 never ended."""
    files = LocalFiles(str(tmp_path))
    record = tmp_path / "ranks" / "rank-1.json"
    ended = b'{"rank": 1, "exit_code": 1, "failed_at": 2.0}'
    files.apply(1, "n2", {"t": "put", "p": "ranks/rank-1.json", "m": 200}, ended)
    files.apply(0, "n1", {"t": "put", "p": "ranks/rank-1.json", "m": 100}, b'{"rank": 1}')
    assert record.read_bytes() == ended
    later = b'{"rank": 1, "exit_code": 1, "failed_at": 2.0, "exited": 2.1}'
    files.apply(0, "n1", {"t": "put", "p": "ranks/rank-1.json", "m": 300}, later)
    assert record.read_bytes() == later
    files.apply(0, "n1", {"t": "put", "p": "ranks/rank-0.json"}, b'{"rank": 0}')  # an older agent
    assert (tmp_path / "ranks" / "rank-0.json").read_bytes() == b'{"rank": 0}'
