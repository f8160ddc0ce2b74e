"""A page of the run list: read from the index a batch at a time, the same rows as the
whole list cut to the page, on SQLite and on PostgreSQL."""

from __future__ import annotations

import shutil

import pytest
from support.made_runs import finish, new_run

from jupyter_trainer.core.errors import SpecError
from jupyter_trainer.store import Store
from jupyter_trainer.store.listing import list_runs, page


@pytest.fixture
def store(index_home) -> Store:
    """A store of 12 runs: names a-0 to c-3, every third failed, one left running."""
    found = Store(index_home)
    for i in range(12):
        run_id = new_run(found, f"{'abc'[i % 3]}-{i}")
        if i != 7:
            finish(found, run_id, "failed" if i % 3 == 0 else "completed")
    return found


FILTERS = [
    {},
    {"status": "failed"},
    {"status": "created"},
    {"status": "lost"},
    {"name": "b-"},
    {"name": "a-", "status": "completed"},
]


def test_a_page_is_the_whole_list_cut_to_it(store):
    for filters in FILTERS:
        whole = [(r["id"], r["status"]) for r in store.list_runs(**filters, limit=1000)]
        for limit, offset in [(1, 0), (3, 2), (50, 0), (4, 10)]:
            found = list_runs(store, **filters, limit=limit, offset=offset)
            assert [(r["id"], r["status"]) for r in found] == whole[offset : offset + limit], (
                filters,
                limit,
                offset,
            )


def test_the_first_page_looks_at_the_folders_of_its_rows_only(store):
    looked: list[str] = []

    def folder_of(row):
        looked.append(row["id"])
        return store.paths(row["id"]).root

    rows = page(
        store.index, folder_of, lambda _: {}, status=None, name=None, owner=None, limit=2, offset=1
    )
    assert len(rows) == 2
    assert looked == [r["id"] for r in store.list_runs(limit=3)]


def test_a_folder_gone_from_the_middle_of_a_batch_leaves_the_page_full(store):
    newest = store.list_runs(limit=5)
    shutil.rmtree(store.paths(newest[1]["id"]).root)  # its row stays in the index
    found = list_runs(store, limit=4)
    assert [r["id"] for r in found] == [r["id"] for r in store.list_runs(limit=4)]


def test_a_page_that_cannot_be_is_refused(home):
    for bad in ({"limit": 0}, {"offset": -1}, {"status": "done"}, {"limit": True}):
        with pytest.raises(SpecError):
            list_runs(Store(home), **bad)


def test_a_store_never_used_lists_nothing_and_makes_no_index(home):
    assert list_runs(Store(home)) == []
    assert not (home / "runs.db").exists()
