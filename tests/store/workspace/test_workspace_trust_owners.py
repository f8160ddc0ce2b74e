"""Who owns a run is the kernel's answer (the owner of its folder), never what a record
says about itself: not a state a member wrote, not an index row anyone with the team's
database role can rewrite; and ``workspace import`` makes the importer the owner."""

from __future__ import annotations

import json
import pwd

from support.workspace_team import MAKE_RUN, PYTHON

FORGE_ROW = """
import sys
from jupyter_trainer.store import Store
Store().index.run(lambda conn: conn.execute(
    "UPDATE runs SET owner = ?, owner_uid = ? WHERE id = ?", (sys.argv[2], int(sys.argv[3]), sys.argv[1])
))
"""

FORGE_STATE = """
import json, os, sys
from pathlib import Path
state_file = Path(sys.argv[1]) / "state.json"
state = json.loads(state_file.read_text())
state["owner"] = {"user": sys.argv[2], "uid": int(sys.argv[3]), "hub_user": None}
state_file.unlink()
state_file.write_text(json.dumps(state))
"""


def test_a_forged_index_row_puts_no_run_in_a_colleagues_mine(team):
    """bob rewrites his run's index row (the team's database role lets him) to say it is
    alice's: alice's ``--mine`` leaves it out, and every list names bob."""
    alice, bob = team.users
    alice_uid = pwd.getpwnam(alice).pw_uid
    hers = team.python(alice, MAKE_RUN, "hers", "ended").stdout.strip()
    his = team.python(bob, MAKE_RUN, "his", "ended").stdout.strip()
    team.python(bob, FORGE_ROW, his, alice, str(alice_uid))
    mine = json.loads(team.cli(alice, "runs", "--mine", "--json").stdout)
    assert [r["id"] for r in mine] == [hers], mine
    listed = {r["id"]: r["owner"] for r in json.loads(team.cli(alice, "runs", "--json").stdout)}
    assert listed == {hers: alice, his: bob}, listed
    doctor = team.cli(alice, "doctor", "--no-hash", check=False)
    assert f"run {his}: the index disagrees with its state: owner {alice!r}" in doctor.stdout


def test_a_state_that_names_another_owner_is_still_its_folders(team):
    """bob's run's state says it is alice's: ``show`` names bob, alice's ``--mine`` leaves
    it out (even once ``doctor --fix`` rewrote its row), and alice cannot cancel it."""
    alice, bob = team.users
    alice_uid = pwd.getpwnam(alice).pw_uid
    his = team.python(bob, MAKE_RUN, "his", "waiting").stdout.strip()
    team.python(bob, FORGE_STATE, str(team.workspace / "runs" / his), alice, str(alice_uid))
    shown = json.loads(team.cli(alice, "show", his, "--json").stdout)
    assert shown["state"]["owner"]["user"] == bob, shown["state"]["owner"]
    team.cli(team.admin, "doctor", "--no-hash", "--fix", check=False)
    mine = json.loads(team.cli(alice, "runs", "--mine", "--json").stdout)
    assert his not in [r["id"] for r in mine], mine
    refused = team.cli(alice, "cancel", his, check=False)
    assert f"cannot cancel run {his}: it belongs to {bob}" in refused.stderr, refused.stderr


def test_workspace_import_makes_the_importer_the_owner(team):
    """alice imports a personal store whose records say they are bob's (a copy of his):
    the runs are hers in the workspace, by their records and by their folders."""
    alice, bob = team.users
    bob_uid = pwd.getpwnam(bob).pw_uid
    personal = team.root / alice / ".jupyter_trainer"
    made = team.run(alice, PYTHON, "-c", MAKE_RUN, "one", "ended", workspace=False).stdout.strip()
    team.python(alice, FORGE_STATE, str(personal / "runs" / made), bob, str(bob_uid))
    team.cli(alice, "workspace", "import", str(personal), "--json")
    state = json.loads((team.workspace / "runs" / made / "state.json").read_text())
    assert state["owner"]["user"] == alice, state["owner"]
    mine = json.loads(team.cli(alice, "runs", "--mine", "--json").stdout)
    assert [r["id"] for r in mine] == [made]
    theirs = json.loads(team.cli(bob, "runs", "--mine", "--json").stdout)
    assert theirs == []
