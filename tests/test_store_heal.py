"""The index heals: deleted, corrupt or replaced ``runs.db`` is rebuilt from the run folders;
an unwritable store fails in one line and creates nothing; creating a run is atomic across
folder and index, also with 16 submitters at once. Real runs, driven through the CLI."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from jupyter_trainer import api
from jupyter_trainer.errors import SpecError, StoreError
from jupyter_trainer.store import Store

from conftest import leftover

CLI = [sys.executable, "-m", "jupyter_trainer.cli"]


def cli(*args: str, home: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, **({"JUPYTER_TRAINER_HOME": str(home)} if home else {})}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, env=env)


def listed(home: Path | None = None) -> dict[str, str]:
    done = cli("runs", "--json", "--limit", "1000", home=home)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return {row["id"]: row["status"] for row in json.loads(done.stdout)}


def run_together(commands: list[list[str]], timeout: float = 240) -> list[tuple[int, str, str]]:
    """Start every CLI command at once; (exit status, stdout, stderr) of each."""
    procs = [subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for args in commands]
    try:
        outs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, outs)]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A store with real finished runs (two completed, one failed) and their statuses."""
    home = tmp_path_factory.mktemp("fleet") / "jt-home"
    scripts = tmp_path_factory.mktemp("scripts")
    ok, bad = scripts / "ok.py", scripts / "bad.py"
    ok.write_text("print('fine')\n")
    bad.write_text("raise SystemExit('no data')\n")
    expected = {}
    for script, status in ((ok, "completed"), (bad, "failed"), (ok, "completed")):
        done = cli("submit", str(script), "--launcher", "python", "--wait", home=home)
        run_id = done.stdout.strip()
        assert run_id and not leftover(run_id), done.stderr
        expected[run_id] = status
    return home, expected


@pytest.fixture
def healed_home(fleet, home) -> dict[str, str]:
    """``home`` holding a copy of the fleet's runs and index; returns the expected statuses."""
    source, expected = fleet
    shutil.copytree(source, home)
    assert listed() == expected
    return expected


def side_files(home: Path, prefix: str) -> list[str]:
    return sorted(p.name for p in home.iterdir() if p.name.startswith(prefix))


def moved_aside(home: Path) -> list[str]:
    """The indexes moved aside as corrupt (their -wal/-shm left out)."""
    return [n for n in side_files(home, "runs.db.corrupt-") if not n.endswith(("-wal", "-shm"))]


def checkpoint(db: Path) -> None:
    """Fold the WAL into the database file, so damage to the file is what SQLite reads."""
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def test_deleted_index_is_rebuilt_with_every_run_and_status(healed_home, home):
    for name in side_files(home, "runs.db"):
        if name != "runs.db.lock":
            (home / name).unlink()
    done = cli("runs", "--json", "--limit", "1000")
    assert done.returncode == 0 and "Traceback" not in done.stderr
    assert {r["id"]: r["status"] for r in json.loads(done.stdout)} == healed_home
    assert done.stderr.count("\n") == 1 and "rebuilt it from 3 run folders" in done.stderr
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


@contextmanager
def read_only(path: Path):
    """``path`` (a file or a folder) read-only for everyone, root included: a read-only
    bind mount of it over itself."""
    try:
        subprocess.run(["mount", "--bind", str(path), str(path)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.fail(f"a read-only bind mount needs root and mount(8): {exc}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], check=True,
                       capture_output=True)
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True, capture_output=True)


def tree(home: Path) -> set[str]:
    """Every path in the store, SQLite's own -wal/-shm of an open index left out."""
    return {str(p.relative_to(home)) for p in home.rglob("*")} - {"runs.db-wal", "runs.db-shm"}


@pytest.mark.parametrize("what", ["home", "index"])
def test_unwritable_store_fails_in_one_line_and_creates_nothing(healed_home, home, tmp_path,
                                                               what):
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
    assert done.stderr.startswith(f"jupyter-trainer: error: cannot write {named} ") or \
        done.stderr.startswith(f"jupyter-trainer: error: the run index {named} cannot be written")
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


def test_a_failing_index_insert_leaves_no_run_folder(healed_home, home, tmp_path):
    script = tmp_path / "ok.py"
    script.write_text("print('fine')\n")
    with sqlite3.connect(home / "runs.db") as conn:  # the index refuses every new row
        conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON runs "
                     "BEGIN SELECT RAISE(ABORT, 'no new rows'); END")
    done = cli("submit", str(script), "--launcher", "python")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "no new rows" in done.stderr and done.stderr.count("\n") == 1
    assert sorted(p.name for p in (home / "runs").iterdir()) == sorted(healed_home)
    assert not list((home / "staging").iterdir())


def test_a_failing_folder_rename_leaves_no_index_row(store, tmp_path):
    """The run folder cannot take its place (its name is taken): the row is rolled back."""
    store.runs_dir.mkdir(parents=True)
    (store.runs_dir / "taken-1").write_text("not a run")
    store.new_run_id = lambda name: "taken-1"
    snapshot = store.staging_dir()
    snapshot.mkdir()
    (snapshot / "x.py").write_text("print(1)")
    from test_store import make_spec

    try:
        with pytest.raises(StoreError, match="already exists"):
            store.create(make_spec(), snapshot)
        assert store.index_rows() == {}
        assert sorted(p.name for p in store.runs_dir.iterdir()) == ["taken-1"]
        assert not list((store.home / "staging").iterdir())
    finally:
        (store.runs_dir / "taken-1").unlink()


def test_sixteen_concurrent_submitters_each_get_a_run(healed_home, home, tmp_path):
    """16 processes submit at once, while the index they all open is missing at first."""
    script = tmp_path / "ok.py"
    script.write_text("from jupyter_trainer import runtime as jt\njt.log(step=0, ok=1)\n")
    for name in ("runs.db", "runs.db-wal", "runs.db-shm"):
        (home / name).unlink(missing_ok=True)
    results = run_together([["submit", str(script), "--launcher", "python", "--name",
                             f"swarm {i}"] for i in range(16)])
    assert all(code == 0 for code, _, _ in results), [err for _, _, err in results]
    assert not any("Traceback" in err for _, _, err in results)
    ids = [out.strip() for _, out, _ in results]
    assert len(set(ids)) == 16
    for run_id in ids:
        api.get_run(run_id).wait(timeout=240)
    statuses = listed()
    assert statuses == {**healed_home, **{run_id: "completed" for run_id in ids}}
    assert set(Store(home).index_rows()) == set(statuses)
    assert not [p for p in (home / "runs").iterdir() if p.name.startswith(".")]
    assert not list((home / "staging").iterdir())
    assert all(not leftover(run_id) for run_id in ids)


@pytest.mark.parametrize("flags, message", [
    (["--limit", "-1"], "limit must be a whole number of at least 1, not -1"),
    (["--limit", "0"], "limit must be a whole number of at least 1, not 0"),
    (["--offset", "-1"], "offset must be a whole number of at least 0, not -1"),
])
def test_runs_limit_and_offset_are_checked(healed_home, flags, message):
    done = cli("runs", *flags)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"jupyter-trainer: error: {message}\n"


def test_runs_paging_in_the_api(healed_home, home):
    newest_first = [run.id for run in api.runs()]
    assert sorted(newest_first) == sorted(healed_home)
    assert [run.id for run in api.runs(limit=1, offset=2)] == newest_first[2:3]
    assert [run.id for run in api.runs(offset=3)] == []
    for bad in ({"limit": -1}, {"limit": 0}, {"limit": True}, {"limit": 1.5},
                {"offset": -1}, {"offset": "1"}):
        with pytest.raises(SpecError, match="limit|offset"):
            api.runs(**bad)
