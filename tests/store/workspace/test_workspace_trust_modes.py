"""A workspace's root and top folders, as real Unix users: set up as docs/workspace.md says
(``chmod 3770``, top folders the administrator's), no member can replace another's entries;
``doctor`` names what is not so, with the fix, and ``doctor --fix`` fixes what the user who
runs it owns."""

from __future__ import annotations

import json
import os
import pwd
import stat

from support.workspace_team import MAKE_RUN

from jupyter_trainer.store.doctor.workspace import TOP_FOLDERS


def _findings(team, user: str, *args: str) -> tuple[int, list[dict]]:
    done = team.cli(user, "doctor", "--no-hash", "--json", *args, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    found = json.loads(done.stdout)["findings"]
    return done.returncode, [f for f in found if f["check"].startswith("workspace")]


def test_a_member_cannot_replace_the_admins_config_in_a_root_set_up_as_the_docs_say(team):
    _alice, bob = team.users
    config = team.workspace / "config.toml"
    before = config.read_text()
    for argv in (("rm", "-f", str(config)), ("mv", str(config), str(config) + ".old")):
        assert team.run(bob, *argv, check=False).returncode != 0
    replaced = team.run(
        bob, "sh", "-c", f"echo 'admin_group = \"{team.group}\"' > {config}", check=False
    )
    assert replaced.returncode != 0
    assert config.read_text() == before


def test_a_config_a_member_replaced_in_an_old_root_is_refused_with_a_message(team):
    alice, bob = team.users
    os.chmod(team.workspace, 0o2770)  # what the docs used to prescribe: no sticky bit
    config = team.workspace / "config.toml"
    team.run(bob, "rm", "-f", str(config))
    team.run(bob, "sh", "-c", f"echo 'admin_group = \"{team.group}\"' > {config}")
    refused = team.cli(alice, "runs", check=False)
    assert refused.returncode == 2
    assert "Traceback" not in refused.stderr
    assert str(team.workspace) in refused.stderr and "sticky" in refused.stderr
    os.chmod(team.workspace, 0o3770)  # the root as it should be: the file is still bob's
    refused = team.cli(alice, "runs", check=False)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert f"{config} belongs to {bob}" in refused.stderr


def test_the_admins_first_command_makes_the_top_folders_and_members_entries_land_there(
    bare_team,
):
    """The administrator's first command in the workspace (any: doctor --fix, as the set-up
    says, or runs) makes every top folder, the administrator's, with the shared mode, so no
    member is first to make one; members' entries then land in them."""
    team = bare_team
    alice, _bob = team.users
    assert [p.name for p in team.workspace.iterdir()] == ["config.toml"]
    team.cli(team.admin, "runs")
    admin = pwd.getpwnam(team.admin).pw_uid
    for name in TOP_FOLDERS:
        made = os.lstat(team.workspace / name)
        assert (made.st_uid, stat.S_IMODE(made.st_mode)) == (admin, 0o3770), name
    run_id = team.python(alice, MAKE_RUN, "r", "ended").stdout.strip()
    assert os.stat(team.workspace / "runs").st_uid == admin
    assert (team.workspace / "runs" / run_id).is_dir()
    assert _findings(team, alice) == (0, [])
    assert _findings(team, team.admin) == (0, [])


def test_doctor_names_a_members_top_folder_and_a_loose_mode_and_fixes_what_it_can(bare_team):
    team = bare_team
    alice, bob = team.users
    team.python(alice, MAKE_RUN, "r", "ended")  # alice makes runs/ first: it is hers
    runs = team.workspace / "runs"
    os.chmod(runs, 0o2770)  # as an older version left it
    os.chmod(team.workspace, 0o3775)
    _code, found = _findings(team, bob)
    by = {(f["check"], f["subject"].split()[-1]): f for f in found}
    owner = by[("workspace-owner", str(runs))]
    assert f"belongs to {alice}" in owner["message"] and "chown" in owner["message"]
    loose = by[("workspace-mode", str(runs))]
    assert f"{alice} (its owner) runs chmod 3770 {runs}" in loose["message"]
    assert "outside the team" in by[("workspace-mode", str(team.workspace))]["message"]

    _code, found = _findings(team, alice, "--fix")
    fixed = [f for f in found if f["fixed"]]
    assert [f["subject"].split()[-1] for f in fixed] == [str(runs)], found
    assert stat.S_IMODE(os.stat(runs).st_mode) == 0o3770
    _code, found = _findings(team, team.admin, "--fix")
    assert stat.S_IMODE(os.stat(team.workspace).st_mode) == 0o3770
    left = [(f["check"], f["subject"].split()[-1]) for f in found if not f["fixed"]]
    assert ("workspace-owner", str(runs)) in left
    assert {check for check, _path in left} == {"workspace-owner"}, found
