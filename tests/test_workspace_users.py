"""A workspace two Unix users share (accounts the fixture makes, in one team group), with its
index on PostgreSQL: each sees the other's runs, neither can cancel the other's through the
CLI or the API, what a run writes is readable by the team and writable by nobody else, and
``workspace import`` copies a personal store in, once."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

RUNUSER = shutil.which("runuser") or "runuser"
REPO = Path(__file__).resolve().parent.parent
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
    """Two users, ``alice-<k>`` and ``bob-<k>``, in the group ``team-<k>``; a workspace
    folder they share (setgid, group-writable, nobody else); a home folder each."""

    def __init__(self, url: str) -> None:
        k = secrets.token_hex(3)
        self.group, self.users = f"jtteam{k}", [f"jta{k}", f"jtb{k}"]
        self.root = Path(tempfile.mkdtemp(prefix="jt-team-"))
        os.chmod(self.root, 0o755)
        subprocess.run(["groupadd", self.group], check=True)
        for user in self.users:
            subprocess.run(
                ["useradd", "-M", "-N", "-g", "users", "-G", self.group, user], check=True
            )
            (self.root / user).mkdir()
            shutil.chown(self.root / user, user)
        self.workspace = self.root / "workspace"
        self.workspace.mkdir()
        shutil.chown(self.workspace, group=self.group)
        os.chmod(self.workspace, 0o2770)
        self.url = url

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
        for user in self.users:
            subprocess.run(["pkill", "-9", "-u", user], check=False)
            subprocess.run(["userdel", user], check=False)
        subprocess.run(["groupdel", self.group], check=False)
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def team(pg_url):
    if os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("runuser"):
        pytest.fail("the two-user tests need root, useradd and runuser (util-linux)")
    found = subprocess.run(
        [PYTHON, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
    )
    if found.stdout.strip() != str(sys.version_info[:2]):
        pytest.fail(
            f"the two-user tests need {PYTHON} of Python {sys.version_info[:2]}, the version of this venv"
        )
    made = Team(pg_url)
    try:
        yield made
    finally:
        made.stop()


def test_each_sees_the_others_runs_and_cannot_cancel_them(team):
    alice, bob = team.users
    running = team.python(alice, MAKE_RUN, "alices-run", "waiting").stdout.strip()
    ended = team.python(alice, MAKE_RUN, "alices-ended", "ended").stdout.strip()
    bobs = team.python(bob, MAKE_RUN, "bobs-run", "ended").stdout.strip()

    listed = json.loads(team.cli(bob, "runs", "--json").stdout)
    assert {r["id"]: r["owner"] for r in listed} == {running: alice, ended: alice, bobs: bob}
    mine = json.loads(team.cli(bob, "runs", "--mine", "--json").stdout)
    assert [r["id"] for r in mine] == [bobs]
    table = team.cli(bob, "runs").stdout
    assert "OWNER" in table.splitlines()[0] and alice in table

    shown = team.cli(bob, "logs", ended).stdout  # reading a colleague's run works
    assert "step 1" in shown
    refused = team.cli(bob, "cancel", running, check=False)
    assert refused.returncode != 0
    assert f"cannot cancel run {running}: it belongs to {alice}" in refused.stderr
    api = team.python(
        bob,
        "import sys\nfrom jupyter_trainer.api.runs import get_run\n"
        "from jupyter_trainer.core.errors import NotOwner\n"
        "try:\n    get_run(sys.argv[1]).cancel(wait=False)\nexcept NotOwner as e:\n    print('refused:', e)\n",
        running,
    )
    assert api.stdout.startswith("refused: you (") and alice in api.stdout
    assert not (team.workspace / "runs" / running / "cancel.request").exists()

    touched = team.run(
        bob, "touch", str(team.workspace / "runs" / running / "cancel.request"), check=False
    )
    assert touched.returncode != 0  # the filesystem refuses too: the folder is alice's
    own = team.cli(alice, "cancel", running, check=False)
    assert f"cannot cancel run {running}" not in own.stderr  # alice may cancel her own


def test_what_a_run_writes_is_read_by_the_team_and_written_by_its_owner_only(team):
    alice, bob = team.users
    run_id = team.python(alice, MAKE_RUN, "modes", "ended").stdout.strip()
    ws = team.workspace
    runs = os.stat(ws / "runs")
    assert stat.S_IMODE(runs.st_mode) == 0o3770  # setgid + sticky, the team's
    folder = ws / "runs" / run_id
    found = os.stat(folder)
    assert stat.S_IMODE(found.st_mode) == 0o2750
    assert found.st_gid == __import__("grp").getgrnam(team.group).gr_gid
    for path in [folder, *folder.rglob("*")]:
        mode = stat.S_IMODE(os.lstat(path).st_mode)
        assert not mode & 0o002, f"{path} is world-writable ({oct(mode)})"
        assert not mode & 0o004, f"{path} is readable by users outside the team ({oct(mode)})"
        if path.is_file():
            assert mode & 0o040, f"{path} is not readable by the team ({oct(mode)})"
    assert team.run(bob, "cat", str(folder / "spec.json")).stdout.startswith("{")
    refused = team.run(bob, "sh", "-c", f"echo x >> {folder / 'state.json'}", check=False)
    assert refused.returncode != 0


def test_workspace_import_copies_a_personal_store_once(team):
    alice, _bob = team.users
    personal = team.root / alice / ".jupyter_trainer"
    made = [  # in a personal store: ~/.jupyter_trainer, SQLite, no index URL
        team.run(alice, PYTHON, "-c", MAKE_RUN, name, "ended", workspace=False).stdout.strip()
        for name in ("one", "two")
    ]
    assert (personal / "runs.db").exists()
    first = json.loads(team.cli(alice, "workspace", "import", str(personal), "--json").stdout)
    assert sorted(first["copied"]["runs"]) == sorted(made) and not first["skipped"]
    listed = json.loads(team.cli(alice, "runs", "--json").stdout)
    assert sorted(r["id"] for r in listed) == sorted(made)
    assert {r["owner"] for r in listed} == {alice} and {r["status"] for r in listed} == {
        "completed"
    }
    again = json.loads(team.cli(alice, "workspace", "import", str(personal), "--json").stdout)
    assert again["copied"] == {"runs": [], "sweeps": [], "models": []}
    assert sorted(again["present"]["runs"]) == sorted(made)
    doctor = team.cli(alice, "doctor", "--no-hash", check=False)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
