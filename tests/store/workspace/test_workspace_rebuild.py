"""A workspace's PostgreSQL table that is missing is made and filled from the run folders in
one transaction: a fill that fails, or a process killed while it fills, leaves the table
missing, never made and empty, so the next process to open the workspace fills it. Real
PostgreSQL, real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import zlib

import psycopg
from conftest import wait_for
from support.made_runs import new_run

from jupyter_trainer.store import Store
from jupyter_trainer.store.pg_index import PgRunIndex

LIST_RUNS = (
    "import sys\nfrom jupyter_trainer.store import Store\n"
    "print(len(Store().list_runs()), flush=True)\n"
)


def lost_table(home, pg_url, monkeypatch, count: int = 3) -> list[str]:
    """``count`` runs in a workspace whose run table was then dropped."""
    monkeypatch.setenv("JUPYTER_TRAINER_INDEX", pg_url)
    store = Store(home)
    made = [new_run(store, f"r{i}") for i in range(count)]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP TABLE runs")
    return made


def count_rows(pg_url: str) -> int | None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        if conn.execute("SELECT to_regclass('runs')").fetchone()[0] is None:
            return None
        return conn.execute("SELECT count(*) FROM runs").fetchone()[0]


def test_a_fill_that_fails_leaves_the_table_for_the_next_process_to_fill(home, pg_url, monkeypatch):
    made = lost_table(home, pg_url, monkeypatch)

    def unreadable_folders() -> list[dict]:
        raise OSError("the shared filesystem went away")

    index = PgRunIndex(home, pg_url, unreadable_folders)
    try:
        index.run(lambda conn: conn.execute("SELECT 1").fetchone())
    except OSError:
        pass
    else:
        raise AssertionError("the fill did not fail")
    assert count_rows(pg_url) is None  # not made, so not made empty
    assert sorted(r["id"] for r in Store(home).list_runs()) == sorted(made)
    assert count_rows(pg_url) == 3


def test_a_process_killed_while_it_fills_leaves_the_table_for_the_next(home, pg_url, monkeypatch):
    lost_table(home, pg_url, monkeypatch)
    env = {**os.environ, "JUPYTER_TRAINER_HOME": str(home)}
    # the run table's turn, held here, stops the fill before it writes anything
    with psycopg.connect(pg_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (zlib.crc32(b"jupyter_trainer:runs"),))
        opener = subprocess.Popen([sys.executable, "-c", LIST_RUNS], env=env)
        try:

            def waiting() -> bool:
                query = (
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND wait_event = 'advisory'"
                )
                return holder.execute(query).fetchone()[0] == 1

            wait_for(waiting, 60, what="the opener to wait for its turn to fill the table")
            opener.send_signal(signal.SIGKILL)
            opener.wait(30)
        finally:
            if opener.poll() is None:
                opener.kill()
                opener.wait()
    assert count_rows(pg_url) in (None, 3)
    again = subprocess.run(
        [sys.executable, "-c", LIST_RUNS], env=env, capture_output=True, text=True, timeout=120
    )
    assert again.stdout.strip() == "3", again.stdout + again.stderr
