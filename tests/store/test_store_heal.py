"""The index heals: deleted, corrupt or replaced ``runs.db`` is rebuilt from the run folders;
an unwritable store fails in one line and creates nothing; creating a run is atomic across
folder and index, also with 16 submitters at once. Real runs, driven through the CLI."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import leftover
from support.jt_cli import cli
from support.made_runs import run_spec
from support.store_fleet import (  # noqa: F401 (any_index, fleet, healed_home: fixtures)
    any_index,
    checkpoint,
    fleet,
    healed_home,
    index_conn,
    listed,
    lose_index,
    moved_aside,
    run_together,
    side_files,
)

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import SpecError, StoreError
from jupyter_trainer.store import Store
from jupyter_trainer.store.index import open_existing
from jupyter_trainer.store.workspace import INDEX_ENV


def test_deleted_index_is_rebuilt_with_every_run_and_status(any_index, home):
    lose_index(home)
    done = cli("runs", "--json", "--limit", "1000")
    assert done.returncode == 0 and "Traceback" not in done.stderr
    assert {r["id"]: r["status"] for r in json.loads(done.stdout)} == any_index
    assert done.stderr.count("\n") == 1 and "rebuilt it from 3 run folders" in done.stderr
    if not os.environ.get(INDEX_ENV):
        assert (home / "runs.db").is_file() and not side_files(home, "runs.db.corrupt")
    assert cli("runs").stderr == ""  # healed once; later opens say nothing


def test_garbage_index_is_moved_aside_and_rebuilt(healed_home, home):
    checkpoint(home / "runs.db")
    garbage = b"this is not a database\n" * 300
    (home / "runs.db").write_bytes(garbage)
    done = cli("runs", "--json", "--limit", "1000")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "moved it aside" in done.stderr
    assert {r["id"]: r["status"] for r in json.loads(done.stdout)} == healed_home
    [aside] = moved_aside(home)
    assert (home / aside).read_bytes() == garbage  # kept, never deleted


def test_a_submit_on_a_corrupt_index_heals_it_and_is_indexed(healed_home, home, tmp_path):
    script = tmp_path / "ok.py"
    script.write_text("print('fine')\n")
    checkpoint(home / "runs.db")
    (home / "runs.db").write_bytes(b"\x00" * 8192)
    done = cli("submit", str(script), "--launcher", "python", "--wait")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert listed() == {**healed_home, done.stdout.strip(): "completed"}
    assert len(moved_aside(home)) == 1


def test_damaged_pages_are_found_mid_query_and_healed(healed_home, home):
    db = home / "runs.db"
    checkpoint(db)
    with open(db, "r+b") as fh:  # keep the header and schema page, wreck the table pages
        fh.seek(4096)
        fh.write(b"\xff" * (db.stat().st_size - 4096))
    assert listed() == healed_home
    assert len(moved_aside(home)) == 1
    assert Store(home).index.problem() is None


def test_a_folder_in_place_of_the_index_is_moved_aside(healed_home, home):
    for name in ("runs.db", "runs.db-wal", "runs.db-shm"):
        (home / name).unlink(missing_ok=True)
    (home / "runs.db").mkdir()
    (home / "runs.db" / "note.txt").write_text("someone's file")
    assert listed() == healed_home
    [aside] = moved_aside(home)
    assert (home / aside / "note.txt").read_text() == "someone's file"


def test_concurrent_openers_of_a_corrupt_index_heal_it_once(healed_home, home):
    checkpoint(home / "runs.db")
    (home / "runs.db").write_bytes(b"\0garbage" * 1000)
    results = run_together([["runs", "--json", "--limit", "1000"]] * 8)
    for code, out, err in results:
        assert code == 0 and "Traceback" not in err, err
        assert {r["id"]: r["status"] for r in json.loads(out)} == healed_home
    assert sum("moved it aside" in err for _, _, err in results) == 1
    assert len(moved_aside(home)) == 1


def test_opening_an_index_never_creates_one(tmp_path):
    """Only a rebuild makes the index: an opener that finds it gone between its check and
    its open (another process moved it aside to rebuild it) must not make an empty one."""
    folder = tmp_path / "a dir?with#odd%chars"
    folder.mkdir()
    with pytest.raises(sqlite3.OperationalError, match="unable to open"):
        open_existing(folder / "runs.db")
    assert list(folder.iterdir()) == []
    sqlite3.connect(folder / "runs.db").close()
    conn = open_existing(folder / "runs.db")
    try:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        conn.close()


@contextmanager
def read_only(path: Path):
    """``path`` (a file or a folder) read-only for everyone, root included: a read-only
    bind mount of it over itself."""
    try:
        subprocess.run(["mount", "--bind", str(path), str(path)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.fail(f"a read-only bind mount needs root and mount(8): {exc}")
    try:
        subprocess.run(
            ["mount", "-o", "remount,bind,ro", str(path)], check=True, capture_output=True
        )
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True, capture_output=True)


def tree(home: Path) -> set[str]:
    """Every path in the store, SQLite's own -wal/-shm of an open index left out."""
    return {str(p.relative_to(home)) for p in home.rglob("*")} - {"runs.db-wal", "runs.db-shm"}


@pytest.mark.parametrize("what", ["home", "index"])
def test_unwritable_store_fails_in_one_line_and_creates_nothing(healed_home, home, tmp_path, what):
    script = tmp_path / "ok.py"
    script.write_text("print('fine')\n")
    cli("runs")  # let the index settle (WAL folded in) before it is frozen
    before = tree(home)
    target = home if what == "home" else home / "runs.db"
    with read_only(target):
        done = cli("submit", str(script), "--launcher", "python", "--wait")
        assert tree(home) == before
    assert done.returncode == 2 and done.stdout == ""
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1
    named = str(home / "runs") if what == "home" else str(home / "runs.db")
    assert done.stderr.startswith(
        f"jupyter-trainer: error: cannot write {named} "
    ) or done.stderr.startswith(f"jupyter-trainer: error: the run index {named} cannot be written")
    assert "writable" in done.stderr and "JUPYTER_TRAINER_HOME" in done.stderr
    assert listed() == healed_home


def test_unwritable_index_in_the_notebook_is_one_line(ip, healed_home, home, tmp_path):
    script = tmp_path / "ok.py"
    script.write_text("print('fine')\n")
    cli("runs")
    before = tree(home)
    with read_only(home / "runs.db"):
        result = ip.run_cell(f"%train {script} --launcher python", store_history=True)
        assert tree(home) == before
    error = result.error_in_exec
    assert isinstance(error, StoreError) and str(home / "runs.db") in str(error)
    assert len(error._render_traceback_()) == 1


REFUSE_ROWS = {  # a trigger that makes the index refuse every new row
    "sqlite": [
        "CREATE TRIGGER refuse BEFORE INSERT ON runs BEGIN SELECT RAISE(ABORT, 'no new rows'); END"
    ],
    "postgresql": [
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'no new rows'; END $$",
        "CREATE TRIGGER refuse BEFORE INSERT ON runs FOR EACH ROW EXECUTE FUNCTION refuse()",
    ],
}


def test_a_failing_index_insert_leaves_no_run_folder(any_index, home, tmp_path):
    script = tmp_path / "ok.py"
    script.write_text("print('fine')\n")
    with index_conn(home) as conn:
        for statement in REFUSE_ROWS["postgresql" if os.environ.get(INDEX_ENV) else "sqlite"]:
            conn.execute(statement)
    done = cli("submit", str(script), "--launcher", "python")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "no new rows" in done.stderr and done.stderr.count("\n") == 1
    assert sorted(p.name for p in (home / "runs").iterdir()) == sorted(any_index)
    assert not list((home / "staging").iterdir())


def test_a_failing_folder_rename_leaves_no_index_row(index_home, tmp_path):
    """The run folder cannot take its place (its name is taken): the row is rolled back."""
    store = Store(index_home)
    store.runs_dir.mkdir(parents=True)
    (store.runs_dir / "taken-1").write_text("not a run")
    store.new_run_id = lambda name: "taken-1"
    snapshot = store.staging_dir()
    snapshot.mkdir()
    (snapshot / "x.py").write_text("print(1)")
    try:
        with pytest.raises(StoreError, match="already exists"):
            store.create(run_spec(), snapshot)
        assert store.index_rows() == {}
        assert sorted(p.name for p in store.runs_dir.iterdir()) == ["taken-1"]
        assert not list((store.home / "staging").iterdir())
    finally:
        (store.runs_dir / "taken-1").unlink()


def test_sixteen_concurrent_submitters_each_get_a_run(any_index, home, tmp_path):
    """16 processes submit at once, while the index they all open is missing at first."""
    healed_home = any_index
    script = tmp_path / "ok.py"
    script.write_text("from jupyter_trainer import runtime as jt\njt.log(step=0, ok=1)\n")
    lose_index(home)
    results = run_together(
        [["submit", str(script), "--launcher", "python", "--name", f"swarm {i}"] for i in range(16)]
    )
    assert all(code == 0 for code, _, _ in results), [err for _, _, err in results]
    assert not any("Traceback" in err for _, _, err in results)
    ids = [out.strip() for _, out, _ in results]
    assert len(set(ids)) == 16
    for run_id in ids:
        api.get_run(run_id).wait(timeout=240)
    statuses = listed()
    assert statuses == {**healed_home, **dict.fromkeys(ids, "completed")}
    assert set(Store(home).index_rows()) == set(statuses)
    assert not [p for p in (home / "runs").iterdir() if p.name.startswith(".")]
    assert not list((home / "staging").iterdir())
    assert all(not leftover(run_id) for run_id in ids)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--limit", "-1"], "limit must be a whole number of at least 1, not -1"),
        (["--limit", "0"], "limit must be a whole number of at least 1, not 0"),
        (["--offset", "-1"], "offset must be a whole number of at least 0, not -1"),
    ],
)
def test_runs_limit_and_offset_are_checked(healed_home, flags, message):
    done = cli("runs", *flags)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"jupyter-trainer: error: {message}\n"


def test_runs_paging_in_the_api(any_index, home):
    newest_first = [run.id for run in api.runs()]
    assert sorted(newest_first) == sorted(any_index)
    assert [run.id for run in api.runs(limit=1, offset=2)] == newest_first[2:3]
    assert [run.id for run in api.runs(offset=3)] == []
    for bad in (
        {"limit": -1},
        {"limit": 0},
        {"limit": True},
        {"limit": 1.5},
        {"offset": -1},
        {"offset": "1"},
    ):
        with pytest.raises(SpecError, match="limit|offset"):
            api.runs(**bad)


# -- damaged run records ---------------------------------------------------------------------
# A run's spec.json or state.json that is missing or unreadable: every command that reads it
# says so in one line that names the file and `jupyter-trainer doctor --fix`, which repairs
# what can be repaired; the others work; nothing prints a traceback.

FIX = "`jupyter-trainer doctor --fix`"


def commands_on(run_id: str, other: str, dest: Path) -> dict[str, list[str]]:
    """Every command that reads run ``run_id``, as CLI arguments."""
    return {
        "show": ["show", run_id],
        "show --json": ["show", run_id, "--json"],
        "logs": ["logs", run_id],
        "cancel": ["cancel", run_id],
        "files": ["files", run_id],
        "download": ["download", run_id, "*", str(dest / "dl")],
        "diff": ["diff", run_id, other],
        "rerun": ["rerun", run_id],
        "resume": ["resume", run_id],
        "stack": ["stack", run_id],
        "register": ["register", run_id, "model", "x"],
        "tensorboard": ["tensorboard", run_id, "--logdir", str(dest / "tb")],
        "mlflow sync": ["mlflow", "sync", run_id, "--uri", f"file:{dest / 'ml'}"],
    }


def damage(path: Path, how: str) -> None:
    if how == "missing":
        path.unlink()
    else:
        os.chmod(path, 0o644)
        text = path.read_text()
        path.write_text(text[: len(text) // 2])


def one_line(done: subprocess.CompletedProcess, *needles: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    for needle in needles:
        assert needle in done.stderr, done.stderr


@pytest.mark.parametrize("how", ["truncated", "missing"])
def test_a_damaged_spec_is_named_in_one_line_and_doctor_sets_the_run_aside(
    ip, any_index, home, tmp_path, how
):
    healed_home = any_index
    run_id = next(r for r, s in healed_home.items() if s == "completed")
    other = next(r for r in healed_home if r != run_id)
    spec = home / "runs" / run_id / "spec.json"
    damage(spec, how)
    named = ["cannot be rebuilt", f"spec {spec} ", FIX, str(home / "damaged" / run_id)]
    commands = commands_on(run_id, other, tmp_path)
    results = dict(zip(commands, run_together(list(commands.values()))))
    for name, (code, out, err) in results.items():
        assert "Traceback" not in err and err.count("\n") <= 1, (name, err)
    for name in (
        "show",
        "show --json",
        "logs",
        "diff",
        "rerun",
        "resume",
        "tensorboard",
        "mlflow sync",
    ):
        code, out, err = results[name]
        assert code == 2 and all(n in err for n in named), (name, code, err)
    assert results["files"][0] == (0 if how == "truncated" else 2)  # outputs/ needs no spec
    assert "already ended (completed" in results["cancel"][2]
    assert listed() == healed_home  # the list reads the index, not the spec
    # The notebook: one line too.
    error = ip.run_cell(f"%train show {run_id}", store_history=True).error_in_exec
    assert str(spec) in str(error) and len(error._render_traceback_()) == 1
    # doctor says what it would do, then does it; every command works again.
    report = cli("doctor", "--no-hash")
    assert report.returncode == 1 and f"run {run_id}: {spec} " in report.stdout
    assert f"--fix would move the run aside to {home / 'damaged' / run_id}" in report.stdout
    fixed = cli("doctor", "--fix", "--no-hash")
    assert fixed.returncode == 0 and "moved aside" in fixed.stdout, fixed.stdout
    assert (home / "damaged" / run_id / "logs").is_dir()
    assert listed() == {r: s for r, s in healed_home.items() if r != run_id}
    one_line(cli("show", run_id), f"no run {run_id!r}")
    assert cli("doctor", "--no-hash").returncode == 0


@pytest.mark.parametrize("how", ["truncated", "missing"])
def test_a_damaged_state_of_an_ended_run_is_named_and_doctor_rebuilds_it(
    any_index, home, tmp_path, how
):
    healed_home = any_index
    failed = next(r for r, s in healed_home.items() if s == "failed")
    other = next(r for r in healed_home if r != failed)
    state = home / "runs" / failed / "state.json"
    damage(state, how)
    named = [f"state {state} ", FIX, "rebuilds it from the run's index row"]
    commands = commands_on(failed, other, tmp_path)
    del commands["rerun"]  # it works: it needs the spec and the code, not the state
    results = dict(zip(commands, run_together(list(commands.values()))))
    for name, (code, out, err) in results.items():
        assert "Traceback" not in err and err.count("\n") <= 1, (name, err)
    for name in ("show", "show --json", "diff", "stack", "tensorboard"):
        code, out, err = results[name]
        assert code == 2 and all(n in err for n in named), (name, code, err)
    code, out, err = results["cancel"]  # the index says it ended, and the message says why
    assert code == 2 and "already ended (failed, by the index)" in err and str(state) in err
    assert results["logs"][0] == 0  # the logs need no state
    assert listed() == healed_home  # an ended run's row is the index's
    with pytest.raises(StoreError, match="doctor --fix"):
        api.get_run(failed).status
    fixed = cli("doctor", "--fix", "--no-hash")
    assert fixed.returncode == 0 and "rebuilt from the index row" in fixed.stdout, fixed.stdout
    shown = json.loads(cli("show", failed, "--json").stdout)["state"]
    assert shown["status"] == "failed" and shown["rebuilt"]["from"] == "index row"
    kept = home / "runs" / failed / shown["rebuilt"]["damaged"]
    assert kept.is_file() == (how == "truncated")
    assert cli("doctor", "--no-hash").returncode == 0


def test_the_monitor_feed_shows_a_damaged_state_as_its_notice(any_index, home):
    """The notebook widget's and the Lab view's feed starts on a run whose state.json is gone
    and says why in its notice, naming the file and the fix, instead of dying."""
    healed_home = any_index
    from conftest import wait_for

    from jupyter_trainer.frontends.views.feeder import ViewFeeder

    run_id = next(r for r, s in healed_home.items() if s == "completed")
    state = home / "runs" / run_id / "state.json"
    state.unlink()
    updates: list[dict] = []
    feeder = ViewFeeder(api.get_run(run_id), updates.append)
    assert feeder.first()["state"]["status"] == "unknown"
    feeder.start()
    try:
        notice = wait_for(
            lambda: next((u["notice"] for u in updates if u.get("notice")), None),
            timeout=20,
            what="the feed's notice",
        )
    finally:
        feeder.stop()
        feeder.join(10)
    assert f"state {state} is missing" in notice and FIX in notice, notice
