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
from support.http_servers import Server, Site
from support.workspace_team import PYTHON, Team, state_of

TOKEN = "s3cr3t-t0ken-of-the-data"
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


@pytest.fixture
def site() -> Iterator[Server]:
    """A server on loopback whose files need ``?token=TOKEN``."""
    served = Server(Site(token=TOKEN))
    yield served
    served.close()


def test_each_members_data_inputs_and_kept_credentials_are_their_own(members, site):
    team = members
    alice, bob = team.users
    for user in (alice, bob):  # one after the other, each with a local folder and a URL
        data = team.root / user / "data"
        data.mkdir()
        (data / f"{user}.txt").write_text("rows")
        shutil.chown(data, user)
        shutil.chown(data / f"{user}.txt", user)
        site.site.files[f"{user}.bin"] = f"weights of {user}".encode()
        url = site.url(f"/file/{user}.bin?token={TOKEN}")
        done = submit(team, user, "--data", f"local={data}", "--data", f"w={url}", check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        own = team.workspace / "users" / user
        assert (own / "cache" / "data-hashes.db").is_file()
        assert stat.S_IMODE((own / "secrets").stat().st_mode) & 0o777 == 0o700
        kept = own / "secrets" / "data-urls.db"
        assert TOKEN.encode() in kept.read_bytes()
    assert not any((team.workspace / name).exists() for name in ("cache", "secrets"))

    runs = {r["owner"]: r["id"] for r in json.loads(team.cli(bob, "runs", "--json").stdout)}
    again = team.cli(alice, "rerun", runs[alice], "--wait", check=False)  # her credentials
    assert again.returncode == 0, again.stdout + again.stderr
    theirs = team.cli(bob, "rerun", runs[alice], check=False)  # hers are not his to use
    assert theirs.returncode != 0
    assert "PermissionError" not in theirs.stderr and "Traceback" not in theirs.stderr
    shown = site.url(f"/file/{alice}.bin?token=***")
    assert (
        f"the data input w ({shown}) was given with credentials, and they are not kept any "
        f"more ({team.workspace / 'users' / bob / 'secrets' / 'data-urls.db'} has no entry "
        "for it); submit the run again with --data w=URL, the full URL"
    ) in theirs.stderr, theirs.stderr


def test_a_members_folder_another_made_first_stops_none_of_her_runs(members):
    """bob makes users/<alice>/ before alice's first run: it is his, so nothing of hers is
    kept there; her own state goes to her home instead, with a warning that names him, and
    her runs with data inputs and targets of her own work as before."""
    team = members
    alice, bob = team.users
    squat = team.workspace / "users" / alice
    team.run(bob, "mkdir", "-m", "0777", str(squat))
    data = team.root / alice / "data"
    data.mkdir()
    (data / "rows.txt").write_text("rows")
    shutil.chown(data, alice)
    shutil.chown(data / "rows.txt", alice)
    team.cli(alice, "target", "add", "mine", "--kind", "local")
    done = submit(team, alice, "--target", "mine", "--data", f"local={data}", check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"belongs to {bob}" in done.stderr and ".jupyter_trainer/workspaces/" in done.stderr
    assert list(squat.iterdir()) == []  # nothing of alice's went into bob's folder
    homes = list((team.root / alice / ".jupyter_trainer" / "workspaces").iterdir())
    assert len(homes) == 1 and (homes[0] / "cache" / "data-hashes.db").is_file()
    assert (homes[0] / "targets.toml").is_file()
    assert stat.S_IMODE(homes[0].stat().st_mode) == 0o700
