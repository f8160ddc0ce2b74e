"""A store with real finished runs to heal: the module-scoped ``fleet`` and copies of it in
``home`` with the index on SQLite or PostgreSQL, and ways to read, lose and inspect that index."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import leftover

from jupyter_trainer.store.workspace import INDEX_ENV
from support.jt_cli import CLI, cli


def listed(home: Path | None = None) -> dict[str, str]:
    done = cli("runs", "--json", "--limit", "1000", home=home)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return {row["id"]: row["status"] for row in json.loads(done.stdout)}


def run_together(commands: list[list[str]], timeout: float = 240) -> list[tuple[int, str, str]]:
    """Start every CLI command at once; (exit status, stdout, stderr) of each."""
    procs = [
        subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for args in commands
    ]
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


@pytest.fixture(params=["sqlite", "postgresql"])
def any_index(request, fleet, home, monkeypatch) -> dict[str, str]:
    """``healed_home`` with its index on SQLite, then on PostgreSQL: a new database, which
    the first command to open it fills from the run folders."""
    on_pg = request.param == "postgresql"
    if on_pg:
        monkeypatch.setenv(INDEX_ENV, request.getfixturevalue("pg_url"))
    source, expected = fleet
    shutil.copytree(source, home, ignore=shutil.ignore_patterns("runs.db*") if on_pg else None)
    assert listed() == expected
    return expected


@contextmanager
def index_conn(home: Path):
    """A connection to the store's run index, on either back end."""
    url = os.environ.get(INDEX_ENV)
    if url:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            yield conn
    else:
        with sqlite3.connect(home / "runs.db") as conn:
            yield conn


def lose_index(home: Path) -> None:
    """Lose the run index: its files deleted, or its table dropped."""
    if os.environ.get(INDEX_ENV):
        with index_conn(home) as conn:
            conn.execute("DROP TABLE runs")
        return
    for name in side_files(home, "runs.db"):
        if name != "runs.db.lock":
            (home / name).unlink()


def side_files(home: Path, prefix: str) -> list[str]:
    return sorted(p.name for p in home.iterdir() if p.name.startswith(prefix))


def moved_aside(home: Path) -> list[str]:
    """The indexes moved aside as corrupt (their -wal/-shm left out)."""
    return [n for n in side_files(home, "runs.db.corrupt-") if not n.endswith(("-wal", "-shm"))]


def checkpoint(db: Path) -> None:
    """Fold the WAL into the database file, so damage to the file is what SQLite reads."""
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
