"""The store's index behind one interface: the same tests on SQLite and on a real PostgreSQL
server (``index_home``), then what only a PostgreSQL workspace has: a run driven by its
supervisor, a database bound to one workspace, and clear errors for a bad URL or a server
that does not answer."""

from __future__ import annotations

import grp
import json
import os
import sqlite3
import threading
from pathlib import Path

import optuna
import psycopg
import pytest
from conftest import RANKS_WRITE, check_shared_modes, wait_for
from support.made_runs import SOMEONE, finish, made_run, new_run
from support.workloads import PEAK

import jupyter_trainer as jt
from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import NotOwner, StoreError
from jupyter_trainer.frontends.views.feed import RunFeed
from jupyter_trainer.store import Store
from jupyter_trainer.store.models import ModelStore
from jupyter_trainer.store.owners import Identity
from jupyter_trainer.store.pg_index import PgRunIndex
from jupyter_trainer.store.sweeps import SweepStore


def drop_index(store: Store) -> None:
    """Lose the run index, as a deleted file or a dropped table loses it."""
    if isinstance(store.index, PgRunIndex):
        with psycopg.connect(store.index.url, autocommit=True) as conn:
            conn.execute("DROP TABLE runs")
    else:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{store.index.path}{suffix}").unlink(missing_ok=True)


def test_runs_are_indexed_listed_filtered_and_deleted(index_home):
    store = Store(index_home)
    mine = [new_run(store, f"digits-{i}") for i in range(3)]
    theirs = new_run(store, "bert", owner=SOMEONE)
    for run_id in mine[:2] + [theirs]:
        finish(store, run_id)
    listed = store.list_runs()
    assert [r["id"] for r in listed] == [theirs, *reversed(mine)]
    me = Identity.current()
    assert {r["owner"] for r in listed} == {me.user, "someone-else"}
    assert [r["id"] for r in store.list_runs(owner=me)] == list(reversed(mine))
    assert [r["id"] for r in store.list_runs(owner=SOMEONE)] == [theirs]
    assert [r["id"] for r in store.list_runs(name="digit", status="completed")] == mine[1::-1]
    assert store.list_runs(name="100%_") == []  # LIKE's wildcards are matched as text
    assert store.list_runs(limit=1, offset=1)[0]["id"] == mine[2]
    row = store.index.row(mine[0])
    assert row["status"] == "completed" and row["owner_uid"] == os.geteuid()
    store.delete(mine[0])
    assert store.index.row(mine[0]) is None and mine[0] not in store.index.rows()
    assert not store.paths(mine[0]).root.exists()
    report = api.doctor(home=index_home, hashes=False)
    assert not report.unresolved, report.text()


def test_doctor_rebuilds_a_lost_index_from_the_folders(index_home):
    store = Store(index_home)
    ids = [new_run(store, f"r{i}") for i in range(3)]
    for run_id in ids:
        finish(store, run_id, "failed" if run_id == ids[1] else "completed")
    before = {
        k: {c: v for c, v in r.items() if c != "updated"} for k, r in store.index.rows().items()
    }
    drop_index(store)
    report = api.doctor(home=index_home, hashes=False)
    assert report.unresolved and "is missing" in report.text()
    fixed = api.doctor(home=index_home, fix=True, hashes=False)
    assert "rebuilt from 3 run folders" in fixed.text()
    after = {
        k: {c: v for c, v in r.items() if c != "updated"}
        for k, r in Store(index_home).index.rows().items()
    }
    assert after == before
    assert not api.doctor(home=index_home, hashes=False).unresolved


def test_a_stale_row_is_found_and_rewritten(index_home):
    store = Store(index_home)
    run_id = new_run(store, "stale")
    finish(store, run_id)
    store.index.upsert({**store.index.row(run_id), "status": "running", "owner": "mallory"})
    report = api.doctor(home=index_home, hashes=False)
    assert report.unresolved and run_id in report.text()
    api.doctor(home=index_home, fix=True, hashes=False)
    row = Store(index_home).index.row(run_id)
    assert row["status"] == "completed" and row["owner"] == Identity.current().user


def test_models_are_numbered_listed_and_deleted(index_home):
    store = Store(index_home)
    run = made_run(store, {"model.pt": b"weights"})
    finish(store, run.id)
    assert [run.register_model("digits", "model.pt").version for _ in range(3)] == [1, 2, 3]
    jt.get_model("digits@3").delete()
    assert run.register_model("digits", "model.pt").version == 4  # 3 is never given again
    rows = ModelStore(index_home).index.rows("digits")
    assert [(r["version"], r["run_id"], r["files"]) for r in rows] == [
        (4, run.id, 1),
        (2, run.id, 1),
        (1, run.id, 1),
    ]
    model = jt.get_model("digits@2")
    assert model.owner_record == Identity.current().record()
    assert not api.doctor(home=index_home, hashes=False).unresolved


def test_cancelling_another_users_run_is_refused_but_not_to_an_admin(index_home, monkeypatch):
    store = Store(index_home)
    theirs = new_run(store, "theirs", owner=SOMEONE)
    with pytest.raises(NotOwner, match=r"cannot cancel run .*: it belongs to someone-else"):
        store.cancel(theirs)
    with pytest.raises(NotOwner):
        store.request_cancel(theirs)
    assert store.cancel_request(theirs) is None
    assert "read-only: this run belongs to someone-else" in api.get_run(theirs).read_only()
    info = RunFeed(api.get_run(theirs)).info()  # what the widget and the Lab view show
    assert info["owner"] == "someone-else" and info["read_only"].startswith("read-only")
    mine = RunFeed(api.get_run(new_run(store, "mine"))).info()
    assert mine["owner"] == Identity.current().user and mine["read_only"] == ""
    monkeypatch.setenv("JUPYTER_TRAINER_ADMIN_GROUP", grp.getgrgid(os.getegid()).gr_name)
    status = Store(index_home).cancel(theirs)  # an admin may
    assert status == "lost" or store.cancel_request(theirs) is not None
    assert api.get_run(theirs).read_only() == ""


def test_a_run_on_a_postgresql_index_is_driven_to_its_end(home, pg_url, monkeypatch):
    monkeypatch.setenv("JUPYTER_TRAINER_INDEX", pg_url)
    run = jt.submit("print('hello from the workspace')\n", launcher="python", wait=True)
    assert run.status == "completed" and "hello from the workspace" in run.logs()

    def row() -> tuple:
        with psycopg.connect(pg_url) as conn:
            query = "SELECT status, owner_uid, started FROM runs WHERE id = %s"
            return conn.execute(query, (run.id,)).fetchone()

    # the state is written first, and the supervisor's update of its row follows it
    status, uid, started = wait_for(lambda: (r := row())[0] == "completed" and r, 30, what="row")
    assert (status, uid) == ("completed", os.geteuid()) and started is not None
    assert not os.path.exists(home / "runs.db")  # no SQLite index beside it
    assert json.loads((home / "workspace.json").read_text())["index"] == "postgresql"


def test_a_workspace_on_postgresql_refuses_to_open_without_its_url(home, pg_url, monkeypatch):
    monkeypatch.setenv("JUPYTER_TRAINER_INDEX", pg_url)
    new_run(Store(home), "one")
    monkeypatch.delenv("JUPYTER_TRAINER_INDEX")
    with pytest.raises(StoreError, match="keeps its index on PostgreSQL, and no URL names it"):
        Store(home)
    (home / "config.toml").write_text(f'index = "{pg_url}"\n')
    assert len(Store(home).list_runs()) == 1


def test_a_database_serves_one_workspace(tmp_path, pg_url, monkeypatch):
    monkeypatch.setenv("JUPYTER_TRAINER_INDEX", pg_url)
    new_run(Store(tmp_path / "team-a"), "a")
    with pytest.raises(StoreError, match="holds the runs of another workspace"):
        Store(tmp_path / "team-b").list_runs()
    (tmp_path / "team-b").mkdir(exist_ok=True)
    (tmp_path / "team-b" / "workspace.json").write_text('{"id": "other", "index": "postgresql"}')
    with pytest.raises(StoreError, match=r"belongs to another workspace \(\w+\), not to"):
        Store(tmp_path / "team-b").list_runs()


@pytest.mark.parametrize(
    "url, message",
    [
        ("mysql://db/team", "not a PostgreSQL URL; write it as postgresql://"),
        ("postgresql://jt:s3cret@127.0.0.1:1/none", "cannot reach the workspace index"),
    ],
)
def test_a_bad_index_url_is_a_clear_error(home, monkeypatch, url, message):
    monkeypatch.setenv("JUPYTER_TRAINER_INDEX", url)
    with pytest.raises(StoreError, match=message) as caught:
        Store(home).list_runs()
    assert "s3cret" not in str(caught.value)
    assert not (home / "runs").exists()
    monkeypatch.delenv("JUPYTER_TRAINER_INDEX")  # before the store is checked for leftovers


def test_an_older_sqlite_index_is_rebuilt_with_the_owner_columns(home):
    store = Store(home)
    run_id = new_run(store, "old")
    with sqlite3.connect(store.index.path) as conn:
        conn.execute("DROP INDEX runs_owner")
        conn.execute("DROP INDEX runs_owner_newest")
        conn.execute("ALTER TABLE runs DROP COLUMN owner_uid")
    fresh = Store(home)
    assert fresh.list_runs()[0]["owner_uid"] == os.geteuid()
    assert [p.name for p in home.glob("runs.db.outdated-*")] and fresh.index.row(run_id)


def test_a_sweep_keeps_its_study_in_the_index_database_and_its_owner(index_home, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(PEAK)
    sweep = jt.sweep(
        script=script,
        space={"x": "choice(0.1, 0.3)", "y": 0.7},
        metric="score",
        trials=2,
        sampler="grid",
        launcher="python",
    )
    sweep.wait(timeout=120)
    assert sweep.status == "completed"
    study = optuna.load_study(study_name=sweep.id, storage=sweep.storage)
    assert sorted(t.params["x"] for t in study.trials) == [0.1, 0.3]
    postgres = os.environ.get("JUPYTER_TRAINER_INDEX")
    assert sweep.storage.startswith("postgresql+psycopg://" if postgres else "sqlite:///")
    sweeps = SweepStore(index_home)
    assert sweeps.owner(sweep.id) == Identity.current().record()
    state = json.loads(sweeps.paths(sweep.id).state.read_text())
    # a state that names someone else does not make the sweep theirs: its folder is ours
    sweeps.write_state(sweep.id, {**state, "owner": SOMEONE.record(), "status": "running"})
    assert sweeps.owner(sweep.id) == Identity.current().record()
    sweeps.write_state(sweep.id, state)


def test_what_ranks_write_in_a_shared_workspace_is_the_teams_to_read(home, pg_url, monkeypatch):
    monkeypatch.setenv("JUPYTER_TRAINER_INDEX", pg_url)
    old = os.umask(0o002)  # a user whose umask would let the group write
    try:
        run = jt.submit(RANKS_WRITE, launcher="torchrun", procs=2, wait=True)
    finally:
        os.umask(old)
    assert run.status == "completed", run.logs()
    assert sorted(p.name for p in (run.path / "outputs" / "deep").iterdir()) == [
        "rank-0.txt",
        "rank-1.txt",
    ]
    assert check_shared_modes(run.path) > 10


def test_a_first_use_of_the_database_waits_for_a_rebuild_under_way(home, pg_url, monkeypatch):
    """A process opening the database sets its tables up while another rebuilds one: the
    set-up waits for the rebuild to commit rather than meet a table being dropped."""
    monkeypatch.setenv("JUPYTER_TRAINER_INDEX", pg_url)
    store = Store(home)
    new_run(store, "one")
    dropped, go, results = threading.Event(), threading.Event(), {}

    def rows_after_go() -> list[dict]:
        dropped.set()  # the old table is dropped, the new one made, in the open transaction
        go.wait(60)
        return store._folder_rows()

    def rebuild() -> None:
        results["rebuild"] = PgRunIndex(home, pg_url, rows_after_go).rebuild("is missing")

    def first_use() -> None:
        try:
            index = PgRunIndex(home, pg_url, store._folder_rows)
            results["count"] = index.run(
                lambda c: tuple(c.execute("SELECT count(*) FROM runs").fetchone())
            )
        except Exception as exc:
            results["count"] = exc

    threads = [threading.Thread(target=rebuild), threading.Thread(target=first_use)]
    threads[0].start()
    assert dropped.wait(60)
    threads[1].start()

    def waits() -> list[str]:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            query = "SELECT wait_event FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            return [row[0] for row in conn.execute(query).fetchall()]

    # it waits for the rebuild's turn, before it reads or touches the table
    assert wait_for(waits, 60, what="the set-up to wait on a lock") == ["advisory"]
    go.set()
    for thread in threads:
        thread.join(60)
    assert results == {"rebuild": (None, 1), "count": (1,)}
