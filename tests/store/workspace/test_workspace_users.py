"""A workspace two Unix users share (accounts the fixture makes, in one team group), with its
index on PostgreSQL: each sees the other's runs, neither can cancel the other's through the
CLI or the API, what a run writes is readable by the team and writable by nobody else, and
``workspace import`` copies a personal store in, once."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat

from conftest import wait_for
from support.workspace_team import MAKE_RUN, PYTHON, TRAIN, processes_of, state_at_end, state_of


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


def test_an_admin_cancels_a_colleagues_run_without_writing_into_it(team):
    alice, bob = team.users
    script = team.root / alice / "train.py"
    script.write_text(TRAIN)
    shutil.chown(script, alice)
    run_id = team.cli(alice, "submit", str(script), "--launcher", "python").stdout.strip()
    folder = team.workspace / "runs" / run_id
    wait_for(lambda: state_of(team, run_id).get("status") == "running", 90, what="training")

    refused = team.cli(bob, "cancel", run_id, check=False)  # a member, not an admin
    assert f"cannot cancel run {run_id}: it belongs to {alice}" in refused.stderr
    assert not list((team.workspace / "requests").iterdir())

    done = team.cli(team.admin, "cancel", run_id, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    ended = state_at_end(team, run_id)
    assert ended["status"] == "canceled", ended
    assert f"(asked by {team.admin}, an admin)" in ended["reason"], ended
    admin_uid = pwd.getpwnam(team.admin).pw_uid
    assert not [p for p in [folder, *folder.rglob("*")] if p.lstat().st_uid == admin_uid]
    assert stat.S_IMODE((team.workspace / "requests").stat().st_mode) == 0o3770
    [request] = (team.workspace / "requests").iterdir()
    assert request.name == f"run-{run_id}.{admin_uid}.cancel"
    assert stat.S_IMODE(request.stat().st_mode) & 0o007 == 0
    assert wait_for(lambda: not processes_of(alice), 30, what="alice's processes to end")


def test_a_members_request_in_the_workspace_does_not_cancel_a_colleagues_run(team):
    """Anyone in the team can write into requests/: only an admin's file, by the kernel's
    record of who wrote it, is acted on."""
    alice, bob = team.users
    script = team.root / alice / "train.py"
    script.write_text(TRAIN.replace("range(600)", "range(30)"))
    shutil.chown(script, alice)
    run_id = team.cli(alice, "submit", str(script), "--launcher", "python").stdout.strip()
    wait_for(lambda: state_of(team, run_id).get("status") == "running", 90, what="training")
    forged = (
        "import sys\n"
        "from pathlib import Path\n"
        "from jupyter_trainer.store.requests import write_cancel\n"
        "write_cancel(Path(sys.argv[1]), 'run', sys.argv[2], 'forged by a member', True)\n"
    )
    team.python(bob, forged, str(team.workspace), run_id)
    bob_uid = pwd.getpwnam(bob).pw_uid
    assert [p.name for p in (team.workspace / "requests").iterdir()] == [
        f"run-{run_id}.{bob_uid}.cancel"
    ]
    ended = state_at_end(team, run_id)
    assert ended["status"] == "completed", ended


def test_an_admin_cancels_a_colleagues_sweep_without_writing_into_it(team):
    alice, _bob = team.users
    script = team.root / alice / "train.py"
    script.write_text(TRAIN.replace("loss=1.0 / (step + 1)", "loss=lr / (step + 1)"))
    shutil.chown(script, alice)
    started = team.cli(
        alice, "sweep", "start", str(script), "--sweep", "lr=choice(0.1,0.2,0.3)",
        "--trials", "3", "--parallel", "1", "--metric", "loss", "--launcher", "python",
    )  # fmt: skip
    sweep_id = started.stdout.strip()
    state = team.workspace / "sweeps" / sweep_id / "state.json"

    def sweep_state() -> dict:
        try:
            return json.loads(state.read_text())
        except (OSError, ValueError):
            return {}

    wait_for(
        what="a trial to train",
        timeout=90,
        predicate=lambda: any(
            t.get("status") == "running" for t in sweep_state().get("trials", [])
        ),
    )
    done = team.cli(team.admin, "sweep", "cancel", sweep_id, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    ended = wait_for(
        lambda: (s := sweep_state()).get("status") in ("canceled", "failed", "completed") and s,
        90,
        what="the sweep's cancel",
    )
    assert ended["status"] == "canceled", ended
    assert f"(asked by {team.admin}, an admin)" in str(ended.get("reason")), ended
    admin_uid = pwd.getpwnam(team.admin).pw_uid
    folder = team.workspace / "sweeps" / sweep_id
    assert not [p for p in [folder, *folder.rglob("*")] if p.lstat().st_uid == admin_uid]
    assert wait_for(lambda: not processes_of(alice), 30, what="alice's processes to end")


def test_a_colleague_diffs_reruns_and_registers_anothers_runs(team):
    """What a colleague can read is enough to compare two runs and to start one again as
    their own; the original stays alice's and untouched."""
    alice, bob = team.users
    script = team.root / alice / "train.py"
    ids = []
    for steps in (3, 4):
        script.write_text(TRAIN.replace("range(600)", f"range({steps})"))
        shutil.chown(script, alice)
        submitted = team.cli(alice, "submit", str(script), "--launcher", "python", "--wait")
        ids.append(submitted.stdout.strip().splitlines()[0])
    first, second = ids
    diff = json.loads(team.cli(bob, "diff", first, second, "--json").stdout)
    assert "range(3)" in json.dumps(diff) and "range(4)" in json.dumps(diff)
    before = sorted(p.name for p in (team.workspace / "runs" / first).rglob("*"))
    assert "model.pt" in before
    rerun = team.cli(bob, "rerun", first, "--wait").stdout.strip().splitlines()[0]
    ended = state_at_end(team, rerun)
    assert ended["status"] == "completed", ended
    assert ended["owner"]["user"] == bob and state_of(team, first)["owner"]["user"] == alice
    assert sorted(p.name for p in (team.workspace / "runs" / first).rglob("*")) == before
    listed = json.loads(team.cli(bob, "runs", "--mine", "--json").stdout)
    assert [r["id"] for r in listed] == [rerun]
    # a colleague's output is a model source: the version is bob's, its lineage alice's run
    team.cli(bob, "register", first, "digits", "model.pt")
    model = json.loads(team.cli(alice, "models", "show", "digits@1", "--json").stdout)
    assert (model["run_id"], model["owner"]["user"]) == (first, bob), model
    assert sorted(p.name for p in (team.workspace / "runs" / first).rglob("*")) == before
