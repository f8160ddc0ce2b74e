"""The run store: ids, the SQLite index, atomic state and the on-disk layout."""

from __future__ import annotations

import json
import sqlite3
import threading
import time

import pytest
from support.made_runs import new_run, run_spec

from jupyter_trainer.core.errors import InvalidRunId, RunNotFound, SpecError
from jupyter_trainer.core.spec import validate_run_id
from jupyter_trainer.store import Store
from jupyter_trainer.store.index import FolderIndex


@pytest.fixture
def store(index_home) -> Store:
    """A fresh store, with its index on SQLite and then on PostgreSQL."""
    return Store(index_home)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "..",
        "../x",
        "a/b",
        "/etc",
        ".hidden",
        "a\nb",
        "x" * 129,
        "a..b",
        None,
        3,
        "run id",
        "ok\x00",
    ],
)
def test_unsafe_run_ids_are_refused_everywhere(store, bad):
    with pytest.raises(InvalidRunId, match="invalid run id"):
        validate_run_id(bad)
    with pytest.raises(InvalidRunId):
        store.paths(bad)


def test_create_layout_and_index(store):
    run_id = new_run(store, "My Run: v2!")
    assert run_id.startswith("my-run-v2-")
    paths = store.paths(run_id)
    for name in ("spec.json", "state.json", "code/x.py"):
        assert (paths.root / name).is_file()
    for name in ("events", "logs", "ranks", "outputs"):
        assert (paths.root / name).is_dir()
    assert not list((store.home / "staging").iterdir())  # the snapshot was moved, not copied
    assert store.read_spec(run_id) == run_spec("My Run: v2!")
    rows = [(r["name"], r["status"]) for r in store.index.rows().values()]
    assert rows == [("My Run: v2!", "created")]
    if isinstance(store.index, FolderIndex):  # SQLite: in WAL mode
        with sqlite3.connect(store.index.path) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_missing_run_is_a_clear_error(store):
    with pytest.raises(RunNotFound, match="no run 'nope-1'.*jupyter-trainer runs"):
        store.read_state("nope-1")


def test_listing_filters_and_pages(store):
    ids = [new_run(store, f"job {i % 2}") for i in range(5)]
    for run_id in ids[:2]:
        state = json.loads(store.paths(run_id).state.read_text())
        store.write_state(run_id, {**state, "status": "completed", "ended": time.time()})
    listed = [r["id"] for r in store.list_runs()]
    assert sorted(listed) == sorted(ids) and len(listed) == 5
    assert [r["id"] for r in store.list_runs(limit=2)] == listed[:2]
    assert [r["id"] for r in store.list_runs(limit=2, offset=2)] == listed[2:4]
    assert {r["id"] for r in store.list_runs(status="completed")} == set(ids[:2])
    assert {r["id"] for r in store.list_runs(name="job 1")} == {ids[1], ids[3]}
    assert store.list_runs(name="%") == []  # LIKE wildcards are matched literally
    with pytest.raises(SpecError, match="unknown status 'done'"):
        store.list_runs(status="done")


def test_created_run_without_supervisor_becomes_lost(store, monkeypatch):
    run_id = new_run(store)
    assert store.read_state(run_id)["status"] == "created"
    monkeypatch.setattr("jupyter_trainer.store.liveness.CREATED_GRACE_S", 0.0)
    assert store.read_state(run_id)["status"] == "lost"
    assert [r["status"] for r in store.list_runs()] == ["lost"]


def test_state_replacement_is_atomic_for_readers(store):
    run_id = new_run(store)
    state = json.loads(store.paths(run_id).state.read_text())
    state["supervisor"] = {"pid": 1, "host": "elsewhere"}
    stop = threading.Event()
    errors = []

    def reader():
        while not stop.is_set():
            try:
                json.loads(store.paths(run_id).state.read_text())
            except json.JSONDecodeError as exc:  # a torn write
                errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    for i in range(300):
        store.write_state(run_id, {**state, "status": "running", "n": i, "pad": "x" * 5000})
    stop.set()
    thread.join()
    assert errors == []


def test_events_and_logs_are_read_incrementally_by_whole_lines(store):
    run_id = new_run(store)
    paths = store.paths(run_id)
    with open(paths.events_file(0), "w") as fh:
        fh.write('{"kind": "metric", "t": 1, "step": 0, "values": {"a": 1}}\n{"kind": "me')
    events, offset = store.read_events(run_id, 0)
    assert [e["step"] for e in events] == [0]
    with open(paths.events_file(0), "a") as fh:
        fh.write('tric", "t": 2, "step": 1, "values": {"a": 2}}\n')
    more, offset2 = store.read_events(run_id, 0, offset)
    assert [e["step"] for e in more] == [1] and offset2 == paths.events_file(0).stat().st_size
    paths.log_file(3).write_text("one\ntwo\npart")
    text, _ = store.read_log(run_id, 3)
    assert text == "one\ntwo\n" and store.ranks(run_id) == [0, 3]


def test_snapshot_and_spec_are_read_only(store):
    run_id = new_run(store)
    assert not (store.paths(run_id).spec.stat().st_mode & 0o222)
    store.delete(run_id)
    assert not store.paths(run_id).root.exists() and store.list_runs() == []


def test_deleting_a_run_leaves_what_its_links_point_to_alone(store, tmp_path):
    """A run's outputs hold a link to a folder outside the run (``os.symlink("/", ...)`` is
    enough): deleting the run removes the link, never changes or removes its target."""
    outside = tmp_path / "shared-data"
    (outside / "sub").mkdir(parents=True)
    (outside / "sub" / "keep.txt").write_text("keep")
    outside.chmod(0o751)
    (outside / "sub").chmod(0o705)
    run_id = new_run(store)
    outputs = store.paths(run_id).outputs
    outputs.mkdir(exist_ok=True)
    (outputs / "data").symlink_to(outside)
    (outputs / "nested").mkdir()
    (outputs / "nested" / "sub").symlink_to(outside / "sub")
    (outputs / "nested").chmod(0o555)
    store.delete(run_id)
    assert not store.paths(run_id).root.exists()
    assert (outside.stat().st_mode & 0o777, (outside / "sub").stat().st_mode & 0o777) == (
        0o751,
        0o705,
    )
    assert (outside / "sub" / "keep.txt").read_text() == "keep"
