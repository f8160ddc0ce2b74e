"""``jupyter-trainer doctor [--fix]`` on real runs: lost runs (a SIGKILLed supervisor),
tampered snapshots, an index that disagrees with the run folders, a corrupt index."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest
from conftest import leftover, wait_for
from support.jt_cli import cli
from support.store_fleet import fleet, healed_home, listed, moved_aside  # noqa: F401 (fixtures)

from jupyter_trainer.store import Store


def doctor(*flags: str) -> tuple[int, list[str]]:
    done = cli("doctor", *flags)
    assert "Traceback" not in done.stderr and done.stderr == "", done.stderr
    return done.returncode, done.stdout.splitlines()


def index_dump(home: Path) -> list[tuple]:
    with sqlite3.connect(home / "runs.db") as conn:
        return conn.execute("SELECT * FROM runs ORDER BY id").fetchall()


def test_a_killed_supervisor_makes_a_lost_run_that_doctor_records(home, tmp_path):
    script = tmp_path / "long.py"
    script.write_text(
        "import time\nfrom jupyter_trainer import runtime as jt\n"
        "for i in range(900):\n    jt.progress(i, 900)\n    time.sleep(0.1)\n"
    )
    done = cli("submit", str(script), "--launcher", "python")
    run_id = done.stdout.strip()
    assert done.returncode == 0 and run_id, done.stderr
    store = Store(home)
    paths = store.paths(run_id)
    wait_for(
        lambda: (
            store.read_state(run_id)["status"] == "running"
            and paths.heartbeat.exists()
            and store.ranks(run_id)
        ),
        timeout=60,
        what="the run to be running",
    )
    first_beat = paths.heartbeat.stat().st_mtime
    wait_for(
        lambda: paths.heartbeat.stat().st_mtime > first_beat,
        timeout=10,
        what="the heartbeat to move",
    )
    supervisor = store.read_state(run_id)["supervisor"]["pid"]
    os.kill(supervisor, signal.SIGKILL)
    killed_at = time.time()
    wait_for(lambda: not leftover(run_id), timeout=30, what="the run's processes to end")
    last_beat = paths.heartbeat.stat().st_mtime
    assert killed_at - 5 < last_beat <= killed_at  # a beat a second, however busy the machine

    [row] = [r for r in json.loads(cli("runs", "--json").stdout) if r["id"] == run_id]
    assert row["status"] == "lost" and row["ended"] == last_beat
    first = cli("show", run_id).stdout.splitlines()[0]
    time.sleep(2.2)
    assert cli("show", run_id).stdout.splitlines()[0] == first  # the duration stopped
    assert first.startswith(f"run {run_id} lost in ")

    recorded = paths.state.read_bytes()
    rows = index_dump(home)
    assert json.loads(recorded)["status"] == "running"
    code, lines = doctor("--no-hash")
    assert code == 1 and len(lines) == 2
    seen = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(last_beat))
    assert lines[0] == (
        f"run {run_id}: lost: its state says running, but its supervisor (pid "
        f"{supervisor} on {os.uname().nodename}) is gone; last seen {seen}; "
        "--fix would record it as lost, ended when the supervisor was last seen"
    )
    assert paths.state.read_bytes() == recorded and index_dump(home) == rows  # nothing changed

    code, lines = doctor("--fix")
    assert code == 0 and lines[0].endswith("fixed: recorded as lost in state.json and the index")
    state = json.loads(paths.state.read_text())
    assert state["status"] == "lost" and state["ended"] == last_beat
    assert state["stages"]["running"]["end"] == last_beat
    assert listed()[run_id] == "lost"
    assert [r[2] for r in index_dump(home) if r[0] == run_id] == ["lost"]
    assert doctor() == (0, [f"no problems in {home} (1 run checked)"])


def test_a_tampered_snapshot_is_reported_and_stays_reported(healed_home, home):
    run_id = sorted(healed_home)[0]
    entry = next(p for p in (home / "runs" / run_id / "code").iterdir() if p.suffix == ".py")
    entry.chmod(0o644)
    with open(entry, "a") as fh:
        fh.write("print('changed after submission')\n")
    for flags in ((), ("--fix",)):
        code, lines = doctor(*flags)
        assert code == 1 and len(lines) == 2, lines
        assert lines[0].startswith(
            f"run {run_id}: its snapshot changed after submission: code/ hashes to sha256:"
        )
        assert lines[1] == f"1 problem in {home} (3 runs checked)"
    assert doctor("--no-hash") == (0, [f"no problems in {home} (3 runs checked)"])


def test_index_disagreements_are_reported_then_fixed(healed_home, home):
    stale = next(run_id for run_id, status in healed_home.items() if status == "completed")
    unindexed = next(run_id for run_id in healed_home if run_id != stale)
    with sqlite3.connect(home / "runs.db") as conn:
        conn.execute("UPDATE runs SET status = 'running', ended = NULL WHERE id = ?", (stale,))
        conn.execute("DELETE FROM runs WHERE id = ?", (unindexed,))
        conn.execute(
            "INSERT INTO runs SELECT 'ghost-1', name, status, target, launcher, nodes, "
            "procs, code_hash, created, started, ended, failed_rank, owner, owner_uid, "
            "hub_user, updated FROM runs "
            "LIMIT 1"
        )
    rows = index_dump(home)
    done = cli("doctor", "--json")
    assert done.returncode == 1 and index_dump(home) == rows
    report = json.loads(done.stdout)
    found = {(f["check"], f["run_id"]): f for f in report["findings"]}
    assert set(found) == {("disagrees", stale), ("unindexed", unindexed), ("orphan-row", "ghost-1")}
    assert not any(f["fixed"] for f in report["findings"])
    assert found[("disagrees", stale)]["message"].startswith(
        "the index disagrees with its state: status 'running' (state: 'completed'), ended None"
    )

    code, lines = doctor("--fix")
    assert code == 0 and len(lines) == 4 and all("; fixed: " in line for line in lines[:3])
    assert lines[3] == f"3 problems found and fixed in {home} (3 runs checked)"
    assert set(Store(home).index_rows()) == set(healed_home)
    assert listed() == healed_home
    assert doctor()[0] == 0


def test_a_corrupt_index_is_left_alone_without_fix(healed_home, home):
    for name in ("runs.db-wal", "runs.db-shm"):
        (home / name).unlink(missing_ok=True)
    garbage = b"not sqlite at all\n" * 100
    (home / "runs.db").write_bytes(garbage)
    code, lines = doctor()
    assert code == 1 and lines[0].startswith(f"the index {home / 'runs.db'} is corrupt (")
    assert lines[0].endswith("--fix would move it aside and rebuild it from the 3 run folders")
    assert (home / "runs.db").read_bytes() == garbage and not moved_aside(home)

    code, lines = doctor("--fix")
    [aside] = moved_aside(home)
    assert code == 0 and lines[0].endswith(
        f"fixed: moved aside to {aside}, rebuilt from 3 run folders"
    )
    assert (home / aside).read_bytes() == garbage
    assert listed() == healed_home


def test_train_doctor_in_the_notebook(ip, healed_home, home, capsys):
    result = ip.run_cell("%train doctor --no-hash", store_history=True)
    assert result.success, result.error_in_exec
    assert capsys.readouterr().out == f"no problems in {home} (3 runs checked)\n"
    with sqlite3.connect(home / "runs.db") as conn:
        conn.execute("DELETE FROM runs")
    result = ip.run_cell("%train doctor --fix --no-hash", store_history=True)
    assert result.success, result.error_in_exec
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 4 and all(
        line.endswith("its folder has no index row; fixed: indexed") for line in out[:3]
    )


@pytest.mark.parametrize("flags", [["--fix", "--json"], ["--no-hash"]])
def test_doctor_on_an_empty_store(home, flags):
    done = cli("doctor", *flags)
    assert done.returncode == 0 and "Traceback" not in done.stderr
