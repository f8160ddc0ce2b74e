"""What each member keeps for themselves in a workspace lives in their own folder,
``users/<name>/``: the warm rank pools, the data caches and the kept data credentials. So
one member's use of them never stops another's runs, and nothing there is another
member's to read, replace or connect to. Real Unix users (``team``), the real CLI."""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from workspace_team import PYTHON, Team, state_of

TINY = """
import torch
from jupyter_trainer import runtime as jt
jt.log(step=0, loss=float(torch.ones(1).sum()))
for name, path in sorted(jt.data.items()):
    print(name, sorted(p.name for p in path.iterdir()) if path.is_dir() else path.read_text())
"""


def script(team: Team, user: str, text: str = TINY) -> Path:
    path = team.root / user / "train.py"
    path.write_text(text)
    shutil.chown(path, user)
    return path


def submit(team: Team, user: str, *args: str, check: bool = True):
    """``submit --wait`` as ``user``; pools they start end after 20 idle seconds."""
    return team.run(
        user,
        "JT_POOL_IDLE_S=20",
        PYTHON,
        "-m",
        "jupyter_trainer",
        "submit",
        str(script(team, user)),
        "--wait",
        *args,
        check=check,
    )


def run_id_of(done) -> str:
    return done.stdout.split()[0] if done.stdout.strip() else ""


@pytest.fixture
def members(team) -> Iterator[Team]:
    """``team``, whose members' pools are stopped before their accounts are removed."""
    yield team
    for user in team.users:
        team.cli(user, "pools", "--stop", "--force", check=False)


def hot_of(team: Team, run_id: str) -> dict:
    return (state_of(team, run_id).get("launcher") or {}).get("hot") or {}


def test_each_members_hot_runs_use_a_pool_of_their_own(members):
    team = members
    alice, bob = team.users
    first = submit(team, alice)
    assert first.returncode == 0, first.stdout + first.stderr
    second = submit(team, bob, check=False)  # bob's default run, after alice's
    assert second.returncode == 0, second.stdout + second.stderr
    assert "internal error" not in second.stdout + second.stderr
    runs = json.loads(team.cli(bob, "runs", "--json").stdout)
    assert {r["owner"]: r["status"] for r in runs} == {alice: "completed", bob: "completed"}
    for user, row in ((r["owner"], r) for r in runs):
        assert hot_of(team, row["id"]).get("used") is True, (user, state_of(team, row["id"]))
        pools = team.workspace / "users" / user / "pools"
        found = os.lstat(pools)
        assert found.st_uid == __import__("pwd").getpwnam(user).pw_uid
        assert stat.S_IMODE(found.st_mode) == 0o700
    assert not (team.workspace / "pools").exists()


def test_a_pool_folder_that_is_not_yours_means_torchrun_with_the_reason(members):
    team = members
    alice, bob = team.users
    users = team.workspace / "users"
    submit(team, bob)  # makes users/bob/ as bob
    taken = users / bob / "pools"
    shutil.rmtree(taken)
    taken.mkdir(mode=0o700)
    shutil.chown(taken, alice)  # as a hostile administrator, or a restore from backup, might
    done = submit(team, bob, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    runs = json.loads(team.cli(bob, "runs", "--json").stdout)
    hot = hot_of(team, runs[0]["id"])
    assert hot.get("used") is False, hot
    assert str(taken) in hot["why"] and alice in hot["why"], hot
