"""Environments in a workspace members share, as real Unix users: a name belongs to whoever
defined it first; by its name alone a member runs only her own definitions and the
administrator's, a colleague's only at a version she names (its content is checked against
that hash); a definition is readable by the team and changed by its owner alone; locks and
built interpreters are each member's own."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

from support.workspace_team import PYTHON, REPO

UV = str(REPO / ".venv" / "bin" / "uv")

DEFINE = """
import sys
from jupyter_trainer import environment
from jupyter_trainer.environment.definition import EnvDefinition
name, value = sys.argv[1], sys.argv[2]
print(environment.define(EnvDefinition(name=name, env={"MARK": value}))["version"])
"""

RESOLVE = """
import json, sys
from jupyter_trainer.core.errors import TrainerError
from jupyter_trainer.environment import resolve
try:
    env = resolve(sys.argv[1])
except TrainerError as exc:
    print(json.dumps({"error": str(exc), "type": type(exc).__name__}))
else:
    print(json.dumps({"variables": dict(env.variables), "lock": env.lock}))
"""


def _py(team, user: str, code: str, *args: str, check: bool = True):
    return team.run(user, f"JUPYTER_TRAINER_UV={UV}", PYTHON, "-c", code, *args, check=check)


def _resolve(team, user: str, name: str) -> dict:
    return json.loads(_py(team, user, RESOLVE, name).stdout)


def _bobs_definition(team, name: str, variables: dict) -> Path:
    """A definition of ``name`` that bob made by hand before anyone else (any member can
    make a folder under ``definitions/``), its ``LATEST`` pointing at it."""
    from jupyter_trainer.environment.definition import EnvDefinition

    bob = team.users[1]
    folder = team.workspace / "environments" / "definitions" / name
    made = EnvDefinition(name=name, env=variables)
    record = {
        "name": name,
        "version": made.version,
        "created": 1.0,
        "definition": made.content(),
        "requirements_file": None,
    }
    for each in (team.workspace / "environments", folder.parent, folder):
        if not each.exists():
            each.mkdir()
            shutil.chown(each, bob, team.group)
            os.chmod(each, 0o2777 if each == folder else 0o3770)
    team.write(bob, folder / f"{made.version}.json", json.dumps(record), 0o666)
    team.write(bob, folder / "LATEST", made.version + "\n", 0o666)
    return folder


def test_a_definition_a_colleague_squatted_is_refused_and_others_still_work(team):
    alice, bob = team.users
    _bobs_definition(team, "train", {"PYTHONPATH": "/home/bob/evil"})
    found = _resolve(team, alice, "train")
    assert found.get("type") == "Untrusted", found
    assert f"belongs to {bob}" in found["error"] and "train" in found["error"]
    defined = _py(team, alice, DEFINE, "train", "alice", check=False)
    assert defined.returncode != 0 and f"belongs to {bob}" in defined.stderr
    assert "Traceback" not in defined.stderr or "Untrusted" in defined.stderr
    # the CLI says so and starts nothing
    script = team.root / alice / "train.py"
    script.write_text("print(1)\n")
    shutil.chown(script, alice)
    refused = team.run(
        alice, f"JUPYTER_TRAINER_UV={UV}", PYTHON, "-m", "jupyter_trainer", "submit",
        str(script), "--env", "train", check=False,
    )  # fmt: skip
    assert refused.returncode == 2 and f"belongs to {bob}" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not (team.workspace / "runs").exists() or not list((team.workspace / "runs").iterdir())
    # her other names are untouched
    _py(team, alice, DEFINE, "mine", "alice")
    assert _resolve(team, alice, "mine")["variables"] == {"MARK": "alice"}


def test_the_team_reads_a_members_definition_and_uses_it_at_a_version(team):
    alice, bob = team.users
    version = _py(team, alice, DEFINE, "shared", "alice").stdout.strip()
    folder = team.workspace / "environments" / "definitions" / "shared"
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o2750
    for path in folder.iterdir():
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o640, path
    shown = team.run(
        bob, f"JUPYTER_TRAINER_UV={UV}", PYTHON, "-m", "jupyter_trainer", "env", "show", "shared"
    )
    assert "MARK" in shown.stdout
    # by its name alone it is alice's to change, so bob is told to name a version
    plain = _resolve(team, bob, "shared")
    assert plain.get("type") == "Untrusted" and f"shared@{version}" in plain["error"], plain
    pinned = _resolve(team, bob, f"shared@{version}")
    assert pinned["variables"] == {"MARK": "alice"}, pinned
    # bob cannot change what the name means for alice
    changed = _py(team, bob, DEFINE, "shared", "bob", check=False)
    assert changed.returncode != 0 and f"belongs to {alice}" in changed.stderr
    assert _resolve(team, alice, "shared")["variables"] == {"MARK": "alice"}
    # versions an older release wrote owner-only are opened to the team at the next define
    for path in folder.iterdir():
        os.chmod(path, 0o600)
    _py(team, alice, DEFINE, "shared", "alice")
    assert {stat.S_IMODE(os.stat(p).st_mode) for p in folder.iterdir()} == {0o640}
    # the administrator's definitions are the team's: every member uses them by name
    _py(team, team.admin, DEFINE, "team-env", "admin")
    assert _resolve(team, bob, "team-env")["variables"] == {"MARK": "admin"}


def test_locks_are_each_members_own(team):
    alice, bob = team.users
    _py(team, alice, DEFINE, "mine", "alice")
    key = _resolve(team, alice, "mine")["lock"]
    own = team.workspace / "users" / alice / "environments" / "locks" / key
    assert (own / "lock.json").is_file()
    assert not (team.workspace / "environments" / "locks").exists()


def test_a_colleague_starts_a_run_on_anothers_environment_again_with_a_lock_of_his_own(team):
    alice, bob = team.users
    version = _py(team, alice, DEFINE, "mine", "alice").stdout.strip()
    script = team.root / alice / "train.py"
    script.write_text("import os\nprint('MARK', os.environ['MARK'])\n")
    shutil.chown(script, alice)

    def cli(user: str, *args: str) -> str:
        done = team.run(user, f"JUPYTER_TRAINER_UV={UV}", PYTHON, "-m", "jupyter_trainer", *args)
        return done.stdout.strip().splitlines()[0]

    first = cli(alice, "submit", str(script), "--env", "mine", "--launcher", "python", "--wait")
    again = cli(bob, "rerun", first, "--wait")
    state = json.loads((team.workspace / "runs" / again / "state.json").read_text())
    assert state["status"] == "completed", state
    assert state["environment"]["version"] == version
    assert "MARK alice" in (team.workspace / "runs" / again / "logs" / "rank-0.log").read_text()
    assert (team.workspace / "users" / bob / "environments" / "locks").is_dir()
