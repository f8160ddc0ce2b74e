"""Targets in a workspace members share, as real Unix users: the team's ``targets.toml`` at
the workspace's root is the administrator's and is used only when the trust check passes; a
member's own targets live in their folder (``users/<name>/targets.toml``); nobody's file
redefines the built-in ``local`` target, and nobody's file stops a colleague's runs."""

from __future__ import annotations

import os
import shutil
import stat

from support.workspace_team import state_of

# What bob's code would do if it ran as a colleague: leave a file named after her uid.
SITECUSTOMIZE = """
import os
open(os.path.join({drop!r}, str(os.getuid())), "w").close()
"""

SCRIPT = "print('trained')\n"


def _bobs_code(team) -> tuple:
    """A folder of bob's with a ``sitecustomize.py`` that marks who ran it, and the folder
    where the marks land."""
    bob = team.users[1]
    evil = team.root / bob / "evil"
    drop = team.root / bob / "drop"
    for folder in (evil, drop):
        folder.mkdir()
        shutil.chown(folder, bob)
    os.chmod(drop, 0o777)
    team.write(bob, evil / "sitecustomize.py", SITECUSTOMIZE.format(drop=str(drop)), 0o644)
    return evil, drop


def _script(team, user: str):
    path = team.root / user / "train.py"
    path.write_text(SCRIPT)
    shutil.chown(path, user)
    return path


def test_a_members_targets_file_does_not_run_his_code_as_a_colleague(team):
    alice, bob = team.users
    evil, drop = _bobs_code(team)
    team.write(
        bob,
        team.workspace / "targets.toml",
        '[targets.local]\nkind = "local"\n'
        f'env = {{ PYTHONPATH = "{evil}", LD_PRELOAD = "{evil}/x.so" }}\n\n'
        '[targets.gpu]\nkind = "local"\n'
        f'env = {{ PYTHONPATH = "{evil}" }}\n',
        0o644,
    )
    done = team.cli(alice, "submit", str(_script(team, alice)), "--launcher", "python", "--wait")
    run_id = done.stdout.strip().splitlines()[0]
    assert state_of(team, run_id)["status"] == "completed"
    assert not list(drop.iterdir()), "bob's code ran as alice"
    # the file is left out, with a warning that names it, its owner and the fix
    assert str(team.workspace / "targets.toml") in done.stderr
    assert f"belongs to {bob}" in done.stderr
    assert "Traceback" not in done.stderr

    asked = team.cli(alice, "submit", str(_script(team, alice)), "--target", "gpu", check=False)
    assert asked.returncode != 0
    assert "Traceback" not in asked.stderr
    assert f"{team.workspace / 'targets.toml'} belongs to {bob}" in asked.stderr
    assert not list(drop.iterdir())
    assert (
        not (team.workspace / "runs").exists()
        or len(list((team.workspace / "runs").iterdir())) == 1
    )


def test_nobodys_own_file_redefines_local(team):
    alice, _bob = team.users
    refused = team.cli(alice, "target", "add", "local", "--kind", "local", check=False)
    assert refused.returncode == 2
    assert "the local target is built in and cannot be redefined" in refused.stderr
    own = team.workspace / "users" / alice / "targets.toml"
    team.cli(alice, "targets")  # makes her folder
    team.write(alice, own, '[targets.local]\nkind = "local"\nenv = { A = "1" }\n', 0o600)
    listed = team.cli(alice, "targets", check=False)
    assert f"{own} defines [targets.local]" in listed.stderr
    assert "remove that table" in listed.stderr
    assert "Traceback" not in listed.stderr


def test_a_members_target_add_is_hers_and_breaks_no_colleagues_submit(team):
    """``target add`` used to write the workspace's ``targets.toml`` 0600, after which every
    other member's submit failed; a member's targets are now her own file's."""
    alice, bob = team.users
    added = team.cli(alice, "target", "add", "mine", "--kind", "local", "env={A=1}")
    own = team.workspace / "users" / alice / "targets.toml"
    assert str(own) in added.stdout
    assert not (team.workspace / "targets.toml").exists()
    assert os.stat(own).st_uid == __import__("pwd").getpwnam(alice).pw_uid
    assert not stat.S_IMODE(os.stat(own).st_mode) & 0o027
    assert "mine" in team.cli(alice, "targets").stdout
    assert "mine" not in team.cli(bob, "targets").stdout

    done = team.cli(bob, "submit", str(_script(team, bob)), "--launcher", "python", "--wait")
    run_id = done.stdout.strip().splitlines()[0]
    assert state_of(team, run_id)["status"] == "completed"

    # the administrator writes the team's file, group-readable, and every member uses it
    team.cli(team.admin, "target", "add", "team-gpu", "--kind", "local", "--team")
    shared = team.workspace / "targets.toml"
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o640
    assert "team-gpu" in team.cli(bob, "targets").stdout
    team.cli(bob, "submit", str(_script(team, bob)), "--target", "team-gpu", "--dry-run")
    # a member cannot write it
    refused = team.cli(bob, "target", "add", "x", "--kind", "local", "--team", check=False)
    assert refused.returncode == 2 and "administrator" in refused.stderr
    # one defined in both: the member's own wins for her, said when she adds it
    both = team.cli(alice, "target", "add", "team-gpu", "--kind", "local", check=False)
    assert both.returncode == 2 and "--replace" in both.stderr
    team.cli(alice, "target", "add", "team-gpu", "--kind", "local", "env={B=2}", "--replace")
    assert "B" in own.read_text()
    assert "B" not in shared.read_text()


def test_a_team_file_nobody_else_can_read_does_not_stop_a_members_run(team):
    _alice, bob = team.users
    team.write(team.admin, team.workspace / "targets.toml", '[targets.t]\nkind = "local"\n', 0o600)
    done = team.cli(bob, "submit", str(_script(team, bob)), "--launcher", "python", "--wait")
    run_id = done.stdout.strip().splitlines()[0]
    assert state_of(team, run_id)["status"] == "completed"
    assert "chmod 640" in done.stderr and "Traceback" not in done.stderr
