"""Which processes a member's records can make a colleague act on: an admin's cancel of a
run whose state is damaged signals only that run's owner's processes, and never because a
file the run's folder holds names them; ``stack`` runs no program a run's records chose."""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import time
from pathlib import Path

from conftest import wait_for
from support.workspace_team import MAKE_RUN, RUNUSER, TRAIN, state_at_end, state_of


def _proc_facts(pid: int) -> dict:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return {"pgid": int(fields[2]), "session": int(fields[3]), "start_ticks": int(fields[19])}


def _start_as(user: str, *argv: str) -> tuple[subprocess.Popen, int]:
    """``argv`` as ``user`` in a session of its own; the process and the pid of ``argv``."""
    proc = subprocess.Popen(
        [RUNUSER, "-u", user, "--", "setsid", "--wait", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    found = wait_for(
        lambda: subprocess.run(
            ["pgrep", "-u", user, "-f", " ".join(argv)], capture_output=True, text=True
        ).stdout.split(),
        20,
        what=f"{argv} as {user}",
    )
    return proc, int(found[0])


def test_an_admins_cancel_signals_no_process_a_members_record_names(team):
    """bob's run has a damaged state and no supervisor; he writes its pool-ranks.json to
    name the admin's own process (its pid, start time, group and session): the admin's
    cancel of bob's run leaves that process alone."""
    _alice, bob = team.users
    run_id = team.python(bob, MAKE_RUN, "planted", "waiting").stdout.strip()
    folder = team.workspace / "runs" / run_id
    proc, pid = _start_as(team.admin, "sleep", "301")
    try:
        facts = _proc_facts(pid)
        record = {
            "ranks": {"0": {"pid": pid, "start_ticks": facts["start_ticks"]}},
            "pgid": facts["pgid"],
            "session": facts["session"],
        }
        plant = (
            "import json, os, sys\n"
            "folder = sys.argv[1]\n"
            "open(os.path.join(folder, 'pool-ranks.json'), 'w').write(sys.argv[2])\n"
            "os.replace(os.path.join(folder, 'state.json'), os.path.join(folder, 'old'))\n"
            "open(os.path.join(folder, 'state.json'), 'w').write('{damaged')\n"
        )
        team.python(bob, plant, str(folder), json.dumps(record))
        done = team.cli(team.admin, "cancel", run_id, check=False)
        time.sleep(0.5)
        assert proc.poll() is None and os.path.exists(f"/proc/{pid}"), (
            f"the admin's own process was signalled: {done.stdout}{done.stderr}"
        )
        assert "Traceback" not in done.stderr, done.stderr
        assert "no process left" in done.stderr, done.stdout + done.stderr
    finally:
        proc.kill()
        subprocess.run(["pkill", "-u", team.admin, "-f", "sleep 301"], check=False)
        proc.wait(10)


PLANT_RUNNING = """
import json, os, socket, sys
from pathlib import Path
folder, owner, trap = Path(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
state = json.loads((folder / "state.json").read_text())
ticks = open("/proc/1/stat").read().rsplit(")", 1)[1].split()[19]
state.update(
    status="running",
    owner=owner,
    python=os.path.join(trap, "python"),
    supervisor={"pid": 1, "host": socket.gethostname(), "start_ticks": int(ticks)},
)
(folder / "state.json").unlink()
(folder / "state.json").write_text(json.dumps(state))
(folder / "ranks" / "rank-0.json").write_text(
    json.dumps({"rank": 0, "pid": 1, "host": socket.gethostname()})
)
"""

TRAP = "#!/bin/sh\ntouch {marker}\n"


def _trap(team, user: str) -> tuple[Path, Path]:
    """A folder of ``user``'s with a ``py-spy`` that leaves a marker when it runs."""
    folder = team.root / user / "venv" / "bin"
    marker = team.root / user / "ran-as"
    team.write(user, folder / "py-spy", TRAP.format(marker=marker), 0o755)
    team.write(user, folder / "python", "", 0o755)
    for place in (folder, folder.parent):
        os.chown(place, pwd.getpwnam(user).pw_uid, -1)
    return folder, marker


def test_stack_refuses_a_run_whose_folder_another_member_made(team):
    """bob makes a run folder whose state says it is alice's and names his own interpreter:
    alice's ``stack`` refuses it, names bob, and runs nothing of his."""
    alice, bob = team.users
    run_id = team.python(bob, MAKE_RUN, "planted", "waiting").stdout.strip()
    folder = team.workspace / "runs" / run_id
    trap, marker = _trap(team, bob)
    owner = json.loads(
        team.python(
            alice,
            "import json;from jupyter_trainer.store.owners import "
            "Identity;print(json.dumps(Identity.current().record()))",
        ).stdout
    )
    team.python(bob, PLANT_RUNNING, str(folder), json.dumps(owner), str(trap))
    done = team.cli(alice, "stack", run_id, check=False)
    assert done.returncode != 0, done.stdout
    assert f"cannot read the stacks of run {run_id}: it belongs to {bob}" in done.stderr, (
        done.stderr
    )
    assert "Traceback" not in done.stderr
    assert not marker.exists()
    listed = json.loads(team.cli(alice, "runs", "--mine", "--json").stdout)
    assert run_id not in [r["id"] for r in listed]


def test_stack_of_a_colleagues_run_is_refused_before_py_spy_runs(team):
    """py-spy would read alice's processes' memory as bob: refused, saying whom to ask."""
    alice, bob = team.users
    run_id = team.python(alice, MAKE_RUN, "hers", "waiting").stdout.strip()
    folder = team.workspace / "runs" / run_id
    owner = json.loads(
        team.python(
            alice,
            "import json;from jupyter_trainer.store.owners import "
            "Identity;print(json.dumps(Identity.current().record()))",
        ).stdout
    )
    team.python(alice, PLANT_RUNNING, str(folder), json.dumps(owner), "/usr/bin")
    done = team.cli(bob, "stack", run_id, check=False)
    assert done.returncode != 0, done.stdout
    assert f"cannot read the stacks of run {run_id}: it belongs to {alice}" in done.stderr
    assert "ask them to run `jupyter-trainer stack RUN`" in done.stderr


TRUSTED_PYTHON = """
import sys
from pathlib import Path
from jupyter_trainer.api.stacks import trusted_python
from jupyter_trainer.store import Store
store = Store()
print(trusted_python(store.settings.trust(), store.paths(sys.argv[1]).state, sys.argv[2]))
"""


def test_the_py_spy_beside_a_runs_interpreter_runs_only_when_both_are_trusted(team):
    """The state names the ranks' interpreter; its py-spy runs as the caller only when the
    state is one the caller trusts and that py-spy is in folders nobody else writes."""
    alice, bob = team.users
    run_id = team.python(alice, MAKE_RUN, "hers", "waiting").stdout.strip()
    bobs, _ = _trap(team, bob)
    hers, _ = _trap(team, alice)
    python = str(hers / "python")
    assert team.python(alice, TRUSTED_PYTHON, run_id, python).stdout.strip() == python
    # the state is alice's: her colleague, even the admin, does not take its interpreter
    for other in (bob, team.admin):
        assert team.python(other, TRUSTED_PYTHON, run_id, python).stdout.strip() == "None"
    # her own state naming a py-spy bob put there
    found = team.python(alice, TRUSTED_PYTHON, run_id, str(bobs / "python")).stdout.strip()
    assert found == "None"
    os.chmod(hers, 0o777)  # a folder anyone may write
    assert team.python(alice, TRUSTED_PYTHON, run_id, python).stdout.strip() == "None"


def test_a_stopped_supervisor_shows_as_unresponsive_and_doctor_reports_it(team):
    """alice's supervisor is stopped (SIGSTOP): its heartbeat grows old while its pid lives.
    ``show``, ``runs`` and ``doctor`` say the run is unresponsive and how to end it."""
    alice, bob = team.users
    script = team.root / alice / "train.py"
    script.write_text(TRAIN)
    os.chown(script, pwd.getpwnam(alice).pw_uid, -1)
    run_id = team.cli(alice, "submit", str(script), "--launcher", "python").stdout.strip()
    wait_for(lambda: state_of(team, run_id).get("status") == "running", 90, what="training")
    pid = state_of(team, run_id)["supervisor"]["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(
            lambda: Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T",
            10,
            what="the supervisor to stop",
        )
        # the stopped supervisor cannot touch its heartbeat: age it rather than wait
        beat = team.workspace / "runs" / run_id / "supervisor.alive"
        old = time.time() - 300
        os.utime(beat, (old, old))
        shown = team.cli(bob, "show", run_id).stdout
        assert f"run {run_id} unresponsive: its supervisor (pid {pid} on " in shown, shown
        assert f"`kill -CONT {pid}`" in shown and "5:0" in shown, shown
        listed = team.cli(alice, "runs").stdout
        assert f"run {run_id} unresponsive" in listed, listed
        [row] = json.loads(team.cli(alice, "runs", "--json").stdout)
        assert row["status"] == "running" and row["stale"]["pid"] == pid, row
        assert row["stale"]["stopped"] is True and row["stale"]["heartbeat_age"] >= 300
        as_json = json.loads(team.cli(alice, "show", run_id, "--json").stdout)
        assert as_json["state"]["stale"]["pid"] == pid
        doctor = team.cli(alice, "doctor", "--no-hash", check=False)
        assert f"run {run_id}: unresponsive: its supervisor (pid {pid}" in doctor.stdout, (
            doctor.stdout + doctor.stderr
        )
        assert doctor.returncode != 0
    finally:
        os.kill(pid, signal.SIGCONT)
    # going on, it touches its heartbeat again: no longer unresponsive
    wait_for(
        lambda: "unresponsive" not in team.cli(alice, "show", run_id).stdout,
        30,
        what="the supervisor to answer again",
    )
    team.cli(alice, "cancel", run_id)
    assert state_at_end(team, run_id)["status"] == "canceled"
