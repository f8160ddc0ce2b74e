"""The node layer through a transport that is not ssh: the real agent on this machine,
reached by ``LocalShell`` and by a transport written here against the ``NodeShell``
protocol alone (as a Ray actor or a scheduler's shell would be)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import pytest

from jupyter_trainer.errors import TargetError
from jupyter_trainer.nodes import calls
from jupyter_trainer.nodes.ssh import SshClient
from jupyter_trainer.nodes.transport import LocalShell, NodeShell


@dataclass
class EnvShell:
    """A transport of its own: every command goes through ``env -i PATH=...`` in a shell,
    and it counts what it ran. Implements NodeShell without inheriting anything."""

    host: str = "envnode"
    ran: int = 0

    def _argv(self, remote: str) -> list[str]:
        return ["env", "-i", "PATH=/usr/bin:/bin", "/bin/sh", "-c", remote]

    def run(self, remote_command: str, *, input: bytes | None = None, timeout: float = 60.0,
            what: str = "a command") -> subprocess.CompletedProcess:
        self.ran += 1
        return subprocess.run(self._argv(remote_command), input=input, capture_output=True,
                              timeout=timeout)

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
    answer = calls.preflight(shell, sys.executable, str(workdir),
                             {"modules": ["json", "no_such_module_jt"], "versions": [],
                              "snapshot": "sha256-00", "tools": ["sh"]}, 60)
    assert answer["workdir"] == str(workdir)
    assert answer["missing"] == ["no_such_module_jt"]
    assert answer["tools"]["sh"]
    assert (workdir / "bin" / answer["agent"].rsplit("/", 1)[-1]).is_file()
    assert getattr(shell, "ran", 1) == 1


def test_a_missing_interpreter_is_named_with_the_fix(tmp_path):
    with pytest.raises(TargetError, match="interpreter /nonexistent/python was not found"):
        calls.preflight(EnvShell(), "/nonexistent/python", str(tmp_path), {}, 30)
