"""An environment's secret variables in a workspace, as real Unix users: its definition,
which the team reads, records them redacted; their values are kept owner-only for its
definer, whose runs get them; a colleague who uses it at a version is told which ones to
supply, and nobody else can read them anywhere in the workspace."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import stat

from support.workspace_team import PYTHON, REPO

UV = str(REPO / ".venv" / "bin" / "uv")
PASSWORD = "hunter2secret"
URL = f"postgresql://u:{PASSWORD}@db/x"

DEFINE = """
import sys
from jupyter_trainer import environment
from jupyter_trainer.environment.definition import EnvDefinition
env = {"DATABASE_URL": sys.argv[2], "HF_TOKEN": "tok-" + sys.argv[2].split(":")[-1].split("@")[0], "MARK": "plain"}
print(environment.define(EnvDefinition(name=sys.argv[1], env=env))["version"])
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
    print(json.dumps({"variables": dict(env.variables)}))
"""


def _py(team, user: str, code: str, *args: str, check: bool = True):
    return team.run(user, f"JUPYTER_TRAINER_UV={UV}", PYTHON, "-c", code, *args, check=check)


def _cli(team, user: str, *args: str, check: bool = True):
    return team.run(
        user, f"JUPYTER_TRAINER_UV={UV}", PYTHON, "-m", "jupyter_trainer", *args, check=check
    )


def test_an_environments_secret_variables_are_its_definers_alone(team):
    alice, bob = team.users
    version = _py(team, alice, DEFINE, "db", URL).stdout.strip()
    folder = team.workspace / "environments" / "definitions" / "db"
    recorded = json.loads((folder / f"{version}.json").read_text())
    assert recorded["definition"]["env"]["DATABASE_URL"] == "postgresql://u:***@db/x"
    assert recorded["definition"]["env"]["HF_TOKEN"] == "***"
    assert recorded["definition"]["env"]["MARK"] == "plain"

    # the definer's own resolve and runs get the real values
    mine = json.loads(_py(team, alice, RESOLVE, "db").stdout)
    assert mine["variables"]["DATABASE_URL"] == URL, mine
    script = team.root / alice / "train.py"
    script.write_text(
        "import hashlib, os\n"
        "seen = hashlib.sha256(os.environ['DATABASE_URL'].encode()).hexdigest()\n"
        f"print('URL', seen == {hashlib.sha256(URL.encode()).hexdigest()!r})\n"
        "print('TOKEN', os.environ['HF_TOKEN'].startswith('tok'))\n"
    )
    shutil.chown(script, alice)
    done = _cli(team, alice, "submit", str(script), "--env", "db", "--launcher", "python", "--wait")
    run_id = done.stdout.strip().splitlines()[0]
    log = (team.workspace / "runs" / run_id / "logs" / "rank-0.log").read_text()
    assert "URL True" in log and "TOKEN True" in log, log

    # nothing bob can read holds the password: not the definition, not the run, not show
    found = team.run(bob, "grep", "-rl", PASSWORD, str(team.workspace), check=False)
    assert found.stdout == "", found.stdout
    for args in (("env", "show", "db"), ("env", "show", f"db@{version}"), ("env", "list")):
        shown = _cli(team, bob, *args)
        assert PASSWORD not in shown.stdout
    assert "DATABASE_URL" in _cli(team, bob, "env", "show", "db").stdout
    assert PASSWORD not in _cli(team, alice, "env", "show", "db").stdout
    kept = [p for p in (team.workspace / "users" / alice).rglob("*") if p.is_file()]
    holding = [p for p in kept if PASSWORD in p.read_text(errors="replace")]
    assert holding, "the definer's values are kept somewhere of hers"
    for path in holding:
        assert path.stat().st_uid == pwd.getpwnam(alice).pw_uid, path
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path

    # bob, at the version named in full, is told which variables to supply; nothing starts
    theirs = json.loads(_py(team, bob, RESOLVE, f"db@{version}").stdout)
    assert theirs.get("type") == "EnvError", theirs
    assert "DATABASE_URL" in theirs["error"] and "HF_TOKEN" in theirs["error"], theirs
    assert "MARK" not in theirs["error"] and alice in theirs["error"], theirs
    bobs = team.root / bob / "train.py"
    bobs.write_text("print(1)\n")
    shutil.chown(bobs, bob)
    before = set(os.listdir(team.workspace / "runs"))
    refused = _cli(
        team, bob, "submit", str(bobs), "--env", f"db@{version}", "--launcher", "python",
        check=False,
    )  # fmt: skip
    assert refused.returncode == 2 and "DATABASE_URL" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    assert set(os.listdir(team.workspace / "runs")) == before

    # a version an older release wrote with its values in it stays hers alone when she next
    # defines the name (other versions are opened to the team then)
    from jupyter_trainer.environment.definition import EnvDefinition

    old = EnvDefinition(name="db", env={"DATABASE_URL": URL})
    content = {**old.content(), "env": {"DATABASE_URL": URL}}
    content.pop("secrets")
    record = {"name": "db", "version": old.legacy_version(), "created": 1.0, "definition": content}
    legacy = folder / f"{old.legacy_version()}.json"
    team.write(alice, legacy, json.dumps(record), 0o600)
    _py(team, alice, DEFINE, "db", URL)
    assert stat.S_IMODE(os.stat(legacy).st_mode) == 0o600
    assert team.run(bob, "grep", "-rl", PASSWORD, str(team.workspace), check=False).stdout == ""
    assert PASSWORD not in _cli(team, alice, "env", "show", f"db@{old.legacy_version()}").stdout

    # an environment without secrets is used at a version as before
    plain = _py(
        team, alice, DEFINE.replace('"HF_TOKEN"', '"HF_HOME"'), "plain", "http://db/x"
    ).stdout.strip()
    used = json.loads(_py(team, bob, RESOLVE, f"plain@{plain}").stdout)
    assert used["variables"]["DATABASE_URL"] == "http://db/x", used


def test_a_definition_an_older_release_wrote_with_its_secret_values_still_runs(home, monkeypatch):
    from jupyter_trainer.environment import manage, resolve
    from jupyter_trainer.environment.definition import EnvDefinition

    monkeypatch.setenv("JUPYTER_TRAINER_UV", UV)
    token = "hf_" + "a" * 34
    made = EnvDefinition(name="old", env={"HF_TOKEN": token, "MARK": "x"})
    version = made.legacy_version()
    assert version != made.version
    content = {**made.content(), "env": {"HF_TOKEN": token, "MARK": "x"}}
    content.pop("secrets")
    folder = home / "environments" / "definitions" / "old"
    folder.mkdir(parents=True)
    record = {"name": "old", "version": version, "created": 1.0, "definition": content}
    (folder / f"{version}.json").write_text(json.dumps(record))
    (folder / "LATEST").write_text(version + "\n")
    env = resolve("old", home=home)
    assert env.version == version and env.variables == {"HF_TOKEN": token, "MARK": "x"}
    assert resolve(f"old@{version}", home=home).variables["HF_TOKEN"] == token
    shown = manage.show_text("old", home=home)
    assert version in shown and token not in shown and "HF_TOKEN" in shown
