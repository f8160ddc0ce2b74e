"""A team that shares a workspace, as real Unix users: the accounts, their group, the admin
group, the workspace's folder set up as docs/workspace.md says, and a way to run commands as
each member (``runuser``) with the system's Python and this venv's packages."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import wait_for

from jupyter_trainer.store import TERMINAL

RUNUSER = shutil.which("runuser") or "runuser"
REPO = Path(__file__).resolve().parents[2]
# The test's own interpreter may live where other users cannot reach (a pyenv under /root):
# the users run the system's Python of the same version, with this venv's packages.
PYTHON = "/usr/bin/python3"
SITE = next(p for p in sys.path if p.endswith("site-packages") and p.startswith(sys.prefix))

MAKE_RUN = """
import json, os, sys, time
os.umask(0o027)  # as a shared workspace's supervisor runs
from jupyter_trainer.core.spec import CodeSpec, RunSpec
from jupyter_trainer.store import Store
store = Store()
snapshot = store.staging_dir()
snapshot.mkdir()
(snapshot / "train.py").write_text("print(1)")
run_id = store.create(RunSpec(name=sys.argv[1], code=CodeSpec(entry="train.py", hash="sha256:0")), snapshot)
paths = store.paths(run_id)
(paths.logs / "rank-0.log").write_text("step 1\\n")
if sys.argv[2] == "ended":
    state = json.loads(paths.state.read_text())
    store.write_state(run_id, {**state, "status": "completed", "ended": time.time()})
print(run_id)
"""


class Team:
    """A workspace set up as docs/workspace.md says: members ``users`` (two) and ``third``
    in the group ``jtteam<k>``, and ``admin``, a member in the admin group ``jtadm<k>`` too,
    who made the workspace's folder (owned by the admin, the team's group, setgid and
    sticky, nobody else) and its ``config.toml``; a home folder each."""

    def __init__(self, url: str, set_up: bool = True) -> None:
        k = secrets.token_hex(3)
        self.group, self.users = f"jtteam{k}", [f"jta{k}", f"jtb{k}"]
        # a third member, in the workspace's admin group too
        self.admins, self.admin = f"jtadm{k}", f"jtc{k}"
        self.third = f"jtd{k}"
        self.root = Path(tempfile.mkdtemp(prefix="jt-team-"))
        os.chmod(self.root, 0o755)
        subprocess.run(["groupadd", self.group], check=True)
        subprocess.run(["groupadd", self.admins], check=True)
        for user in self.everyone:
            groups = f"{self.group},{self.admins}" if user == self.admin else self.group
            subprocess.run(["useradd", "-M", "-N", "-g", "users", "-G", groups, user], check=True)
            (self.root / user).mkdir()
            shutil.chown(self.root / user, user)
        self.workspace = self.root / "workspace"
        self.workspace.mkdir()
        shutil.chown(self.workspace, self.admin, self.group)
        os.chmod(self.workspace, 0o3770)
        config = self.workspace / "config.toml"
        config.write_text(f'admin_group = "{self.admins}"\n')
        shutil.chown(config, self.admin, self.group)
        os.chmod(config, 0o640)
        self.url = url
        if set_up:  # the administrator's last step of the set-up, as docs/workspace.md says
            self.cli(self.admin, "doctor", "--fix", check=False)
            made = sorted(p.name for p in self.workspace.iterdir() if p.is_dir())
            assert {"runs", "models", "users", "environments"} <= set(made), made

    @property
    def everyone(self) -> list[str]:
        return [*self.users, self.third, self.admin]

    def write(self, user: str, path: Path, text: str, mode: int = 0o640) -> Path:
        """``text`` in ``path``, written as ``user`` would (owner, the team's group, ``mode``)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        shutil.chown(path, user, self.group)
        os.chmod(path, mode)
        return path

    def run(
        self, user: str, *argv: str, check: bool = True, workspace: bool = True
    ) -> subprocess.CompletedProcess:
        """``argv`` as ``user``, in the workspace (or, not, in their personal store)."""
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(self.root / user),
            "PYTHONPATH": f"{REPO}:{SITE}",
        }
        if workspace:
            env.update(JUPYTER_TRAINER_HOME=str(self.workspace), JUPYTER_TRAINER_INDEX=self.url)
        done = subprocess.run(
            [RUNUSER, "-u", user, "--", "/usr/bin/env", f"HOME={self.root / user}", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=self.root,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{argv} as {user}: {done.stdout}{done.stderr}")
        return done

    def python(self, user: str, code: str, *args: str, check: bool = True):
        return self.run(user, PYTHON, "-c", code, *args, check=check)

    def cli(self, user: str, *args: str, check: bool = True):
        return self.run(user, PYTHON, "-m", "jupyter_trainer", *args, check=check)

    def stop(self) -> None:
        for user in self.everyone:
            subprocess.run(["pkill", "-9", "-u", user], check=False)
            subprocess.run(["userdel", user], check=False)
        for group in (self.group, self.admins):
            subprocess.run(["groupdel", group], check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def make_team(pg_url: str, set_up: bool = True):
    """A ``Team`` for one test, removed with its users after it (the ``team`` fixture);
    without ``set_up``, the administrator has not yet made the top folders."""
    if os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("runuser"):
        pytest.fail("the workspace members' tests need root, useradd and runuser (util-linux)")
    found = subprocess.run(
        [PYTHON, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
    )
    if found.stdout.strip() != str(sys.version_info[:2]):
        pytest.fail(
            f"the workspace members' tests need {PYTHON} of Python {sys.version_info[:2]}, the version of this venv"
        )
    made = Team(pg_url, set_up)
    try:
        yield made
    finally:
        made.stop()


TRAIN = """
import time
from jupyter_trainer import runtime as jt
for step in range(600):
    jt.log(step=step, loss=1.0 / (step + 1))
    time.sleep(0.1)
(jt.outputs_dir / "model.pt").write_bytes(b"weights")
"""


def state_of(team: Team, run_id: str) -> dict:
    try:
        return json.loads((team.workspace / "runs" / run_id / "state.json").read_text())
    except (OSError, ValueError):
        return {}


def state_at_end(team: Team, run_id: str) -> dict:
    return wait_for(
        lambda: (s := state_of(team, run_id)).get("status") in TERMINAL and s,
        90,
        what=f"run {run_id} to end",
    )


def processes_of(user: str) -> list[str]:
    found = subprocess.run(["pgrep", "-a", "-u", user], capture_output=True, text=True)
    return found.stdout.splitlines()
