"""``jupyter-trainer doctor [--fix]`` on the model registry and the data input caches: a
missing or corrupt models.db, versions without rows and rows without versions, damaged
lineage files and copies, registrations and deletions cut short; a corrupt data hash
cache, truncated or unreadable downloads of URL inputs and downloads cut short. Each is
damaged for real in a store the code made, then checked through the CLI."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import pytest
from support.http_servers import http_folder  # noqa: F401 (fixture)
from support.jt_cli import cli
from support.made_runs import writable

import jupyter_trainer as jt
from jupyter_trainer.api import runs as api
from jupyter_trainer.inputs import resolve_inputs

HOUR_AGO = time.time() - 3600


def doctor(*flags: str) -> tuple[int, list[str]]:
    done = cli("doctor", *flags)
    assert "Traceback" not in done.stderr and done.stderr == "", done.stderr
    return done.returncode, done.stdout.splitlines()


def findings(*flags: str) -> dict[tuple[str, str | None], dict]:
    done = cli("doctor", "--json", *flags)
    assert done.stderr == "", done.stderr
    return {(f["check"], f["subject"]): f for f in json.loads(done.stdout)["findings"]}


def finished_run(files: dict[str, bytes]) -> api.Run:
    """A completed run whose outputs/ holds ``files``."""
    code = (
        "from jupyter_trainer import runtime as jt\n"
        f"for rel, data in {files!r}.items():\n"
        "    (jt.outputs_dir / rel).parent.mkdir(parents=True, exist_ok=True)\n"
        "    (jt.outputs_dir / rel).write_bytes(data)\n"
    )
    return api.submit(code, launcher="python", wait=True)


def model_rows(home: Path) -> list[tuple]:
    with sqlite3.connect(home / "models.db") as conn:
        return conn.execute("SELECT name, version, tags FROM models ORDER BY 1, 2").fetchall()


def backdate(path: Path) -> None:
    """Make ``path`` and everything in it look untouched for an hour."""
    for item in [*path.rglob("*"), path]:
        os.utime(item, (HOUR_AGO, HOUR_AGO), follow_symlinks=False)


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every entry under ``root``: a file's bytes, a link's target, a folder's mark."""
    found: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        found[rel] = (
            f"-> {os.readlink(path)}"
            if path.is_symlink()
            else path.read_bytes()
            if path.is_file()
            else "dir"
        )
    return found


@pytest.fixture
def registry(home, tmp_path):
    """digits@1 (a file), digits@2 (a folder), other@1, third@1, damaged in every way."""
    run = finished_run({"model.pt": b"weights", "tok/a.txt": b"a", "tok/b.txt": b"b"})
    run.register_model("digits", "model.pt")
    tok = run.register_model("digits", "tok")
    other = run.register_model("other", "model.pt")
    run.register_model("third", "model.pt")
    with sqlite3.connect(home / "models.db") as conn:
        conn.execute("DELETE FROM models WHERE name = 'digits' AND version = 1")
        conn.execute(
            "UPDATE models SET tags = '{\"stage\": \"prod\"}' WHERE name = 'digits' AND version = 2"
        )
        conn.execute(
            "INSERT INTO models SELECT 'ghost', 1, run_id, path, files, bytes, "
            "created, tags FROM models LIMIT 1"
        )
    writable(other.folder)
    (other.folder / "lineage.json").write_text("{not json")
    writable(tok.folder)
    (tok.folder / "tok" / "a.txt").write_bytes(b"tampered")
    models = home / "models"
    (models / "third" / ".deleted.json").write_text("[")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "lineage.json").write_text("{}")
    (models / "digits" / "9").symlink_to(elsewhere)
    for stale in (
        models / "digits" / ".register-abc123",
        models / "digits" / ".delete-7-ab",
        models / ".delete-gone-cd",
    ):
        (stale / "tok").mkdir(parents=True)
        (stale / "tok" / "w.bin").write_bytes(b"partial")
        (stale / "tok").chmod(0o555)
        backdate(stale)
    fresh = models / "other" / ".register-busy"  # a registration going on right now
    fresh.mkdir()
    (fresh / "w.bin").write_bytes(b"being copied")
    return {"run": run, "elsewhere": elsewhere}


def test_doctor_reports_then_fixes_the_model_registry(registry, home):
    models = home / "models"
    rows, files = model_rows(home), snapshot(models)
    found = findings()
    assert set(found) == {
        ("model-unindexed", "model digits@1"),
        ("model-disagrees", "model digits@2"),
        ("model-files", "model digits@2"),
        ("model-link", "model digits@9"),
        ("model-lineage", "model other@1"),
        ("model-orphan-row", "model ghost@1"),
        ("model-deleted-record", "model third"),
        ("model-partial", "model registry"),
    }
    partial = [
        f
        for f in json.loads(cli("doctor", "--json").stdout)["findings"]
        if f["check"] == "model-partial"
    ]
    assert sorted(f["message"].rsplit(" ", 1)[1] for f in partial) == sorted(
        str(models / p)
        for p in ("digits/.register-abc123", "digits/.delete-7-ab", ".delete-gone-cd")
    )
    assert found[("model-files", "model digits@2")]["message"] == (
        "the registry's copy is damaged: tok/a.txt does not match its recorded size and "
        f"sha256; register it again from run {registry['run'].id}"
    )
    assert found[("model-lineage", "model other@1")]["message"].startswith(
        "its lineage.json is damaged: it is not JSON ("
    )
    assert found[("model-disagrees", "model digits@2")]["message"] == (
        'the model index disagrees with its lineage.json: tags \'{"stage": "prod"}\' '
        "(lineage.json: '{}')"
    )
    assert model_rows(home) == rows and snapshot(models) == files  # nothing changed

    code, lines = doctor("--fix")
    assert code == 1, lines
    assert lines[-1] == (f"3 problems in {home} (1 run, 5 model versions checked)")
    fixed = [line for line in lines if "; fixed: " in line]
    assert len(fixed) == 7 and len(lines) == 11
    assert "model digits@9: its folder is a link to " in "\n".join(lines)
    assert model_rows(home) == [
        ("digits", 1, "{}"),
        ("digits", 2, "{}"),
        ("other", 1, "{}"),
        ("third", 1, "{}"),
    ]
    assert not (models / "digits" / "9").exists() and not (models / ".delete-gone-cd").exists()
    assert (registry["elsewhere"] / "lineage.json").read_text() == "{}"  # not followed
    assert sorted(p.name for p in (models / "digits").iterdir()) == ["1", "2"]
    assert (models / "other" / ".register-busy" / "w.bin").exists()  # still going: left alone
    assert set(findings()) == {
        ("model-files", "model digits@2"),
        ("model-lineage", "model other@1"),
        ("model-deleted-record", "model third"),
    }
    assert ("model-files", "model digits@2") not in findings("--no-hash")
    jt.delete_model("other@1")
    jt.delete_model("digits@2")
    (models / "third" / ".deleted.json").write_text("{}")
    assert doctor() == (0, [f"no problems in {home} (1 run, 2 model versions checked)"])


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda db: db.unlink(), "is missing"),
        (lambda db: db.write_bytes(b"not a database\n" * 100), "is corrupt ("),
    ],
)
def test_a_missing_or_corrupt_model_index_is_rebuilt(home, damage, problem):
    run = finished_run({"model.pt": b"weights"})
    for _ in range(2):
        run.register_model("digits", "model.pt")
    rows = model_rows(home)
    for suffix in ("-wal", "-shm"):
        Path(f"{home / 'models.db'}{suffix}").unlink(missing_ok=True)
    damage(home / "models.db")
    code, lines = doctor()
    assert code == 1 and lines[0].startswith(f"the model index {home / 'models.db'} {problem}")
    assert lines[0].endswith("--fix would move it aside and rebuild it from the 2 model folders")
    code, lines = doctor("--fix")
    assert code == 0 and lines[0].endswith("rebuilt from 2 model folders"), lines
    assert model_rows(home) == rows
    assert doctor() == (0, [f"no problems in {home} (1 run, 2 model versions checked)"])


def test_doctor_checks_and_clears_the_data_caches(home, tmp_path, http_folder):
    served, base = http_folder
    for name in ("a.bin", "b.bin", "c.bin"):
        (served / name).write_bytes(os.urandom(50_000))
    local = tmp_path / "local"
    local.mkdir()
    (local / "x.txt").write_text("x")
    resolve_inputs(
        {"a": f"{base}/a.bin", "b": f"{base}/b.bin", "c": f"{base}/c.bin", "d": str(local)},
        home=home,
    )
    cache = home / "cache"
    entries = {
        json.loads((p / "source.json").read_text())["url"].rsplit("/", 1)[1]: p
        for p in (cache / "data-url").iterdir()
    }
    with open(entries["a.bin"] / "a.bin", "r+b") as fh:
        fh.truncate(20_000)  # a download cut off, but in place
    (entries["b.bin"] / "source.json").write_text("{garbage")
    stale = cache / "data-url" / f".{entries['c.bin'].name}-x1y2"
    stale.mkdir()
    (stale / "c.bin").write_bytes(b"half")
    backdate(stale)
    busy = cache / "data-url" / f".{entries['c.bin'].name}-busy"
    busy.mkdir()
    (busy / "c.bin").write_bytes(b"downloading")
    for suffix in ("-wal", "-shm"):
        Path(f"{cache / 'data-hashes.db'}{suffix}").unlink(missing_ok=True)
    (cache / "data-hashes.db").write_bytes(b"garbage" * 500)
    before = snapshot(cache)

    found = findings()
    rel = lambda p: f"data cache {p.relative_to(home)}"
    assert set(found) == {
        ("data-hashes", "data cache"),
        ("data-corrupt", rel(entries["a.bin"])),
        ("data-corrupt", rel(entries["b.bin"])),
        ("data-partial", rel(stale)),
    }
    assert found[("data-corrupt", rel(entries["a.bin"]))]["message"].startswith(
        "its download a.bin has 20000 bytes, the server announced 50000: it is incomplete"
    )
    assert found[("data-corrupt", rel(entries["b.bin"]))]["message"].startswith(
        "its source.json cannot be read ("
    )
    assert snapshot(cache) == before

    code, lines = doctor("--fix")
    assert (
        code == 0
        and lines[-1]
        == f"4 problems found and fixed in {home} (0 runs, 6 data cache entries checked)"
    ), lines
    assert sorted(p.name for p in (cache / "data-url").iterdir()) == sorted(
        [entries["c.bin"].name, busy.name]
    )
    assert not (cache / "data-hashes.db").exists()
    resolve_inputs({"a": f"{base}/a.bin", "b": f"{base}/b.bin"}, home=home)  # fetched again
    busy.rename(tmp_path / "busy")  # that download finished elsewhere
    assert doctor() == (0, [f"no problems in {home} (0 runs, 4 data cache entries checked)"])
