"""Deleting model versions: from the Python API, the CLI and ``%train``; numbers never given
again, the index kept in step, another user's versions refused without ``force``, a damaged
version still deletable, and no path trick reaching outside the registry."""

from __future__ import annotations

import grp
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.jt_cli import cli
from support.made_runs import forge, made_run, writable

import jupyter_trainer as jt
from jupyter_trainer.core.errors import ModelNotFound, NotOwner, SpecError
from jupyter_trainer.store import Store
from jupyter_trainer.store.models import ModelStore
from jupyter_trainer.store.workspace import INDEX_ENV


def index(home: Path) -> list[tuple[str, int]]:
    """The model index's (name, version) rows, on either back end."""
    query = "SELECT name, version FROM models ORDER BY name, version"
    url = os.environ.get(INDEX_ENV)
    if url:
        import psycopg

        with psycopg.connect(url) as conn:
            return [tuple(row) for row in conn.execute(query).fetchall()]
    with sqlite3.connect(home / "models.db") as conn:
        return conn.execute(query).fetchall()


def lose_index(home: Path) -> None:
    """Lose the model index: its file deleted, or its table dropped."""
    url = os.environ.get(INDEX_ENV)
    if url:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DROP TABLE models")
    else:
        (home / "models.db").unlink()


@pytest.fixture
def run(index_home):
    """A run with outputs to register, in a store whose index is on SQLite, then on
    PostgreSQL."""
    return made_run(Store(index_home), {"model.pt": b"weights", "tok/a.txt": b"a"})


def test_delete_a_version_and_its_number_is_never_given_again(run, home):
    for _ in range(3):
        run.register_model("digits", "model.pt")
    jt.get_model("digits@2").delete()
    assert [m.version for m in jt.models("digits")] == [3, 1]
    assert index(home) == [("digits", 1), ("digits", 3)]
    assert sorted(p.name for p in (home / "models" / "digits").iterdir()) == [
        ".deleted.json",
        "1",
        "3",
    ]
    with pytest.raises(
        ModelNotFound,
        match=r"model 'digits' has no version 2: it was deleted "
        r"\(\d{4}-\d\d-\d\d .* by \w+\); it has versions 1, 3$",
    ):
        jt.get_model("digits@2")
    assert jt.delete_model("digits@3") == [3]
    assert run.register_model("digits", "model.pt").version == 4  # not 3 again
    lose_index(home)  # the index is a cache: the numbers live in the folders
    assert run.register_model("digits", "model.pt").version == 5
    assert run.outputs.joinpath("model.pt").read_bytes() == b"weights"  # the run is untouched


def test_delete_every_version_frees_the_name(run, home):
    run.register_model("digits", "model.pt")
    run.register_model("digits", "tok")
    run.register_model("other", "model.pt")
    jt.get_model("digits@1").delete()
    with pytest.raises(
        SpecError,
        match=r"say which version of digits to delete \(digits@N; it "
        r"has 2\), or all_versions=True",
    ):
        jt.delete_model("digits")
    with pytest.raises(SpecError, match="not both"):
        jt.delete_model("digits@2", all_versions=True)
    assert jt.delete_model("digits", all_versions=True) == [2]
    assert not (home / "models" / "digits").exists() and index(home) == [("other", 1)]
    assert not [p for p in (home / "models").iterdir() if p.name.startswith(".")]
    assert run.register_model("digits", "model.pt").version == 1
    with pytest.raises(ModelNotFound, match="no model 'nope'"):
        jt.delete_model("nope", all_versions=True)


SOMEONE = {"user": "someone-else", "uid": 4242, "hub_user": None}


def test_another_users_version_needs_an_admin_and_force(run, home, monkeypatch):
    mine = run.register_model("digits", "model.pt")
    theirs = run.register_model("digits", "model.pt")
    assert mine.lineage["owner"]["uid"] == os.geteuid()
    forge(theirs, theirs.lineage["files"], user="someone-else", owner=SOMEONE)
    with pytest.raises(
        NotOwner,
        match=r"digits@2 by someone-else: registered by another user, "
        r"not you \(\w+\); nothing was deleted",
    ):
        jt.get_model("digits@2").delete()
    with pytest.raises(NotOwner):
        jt.delete_model("digits", all_versions=True)
    assert [m.version for m in jt.models("digits")] == [2, 1] and mine.folder.exists()
    with pytest.raises(NotOwner, match="only members of the workspace's admin group"):
        jt.get_model("digits@2").delete(force=True)
    assert [m.version for m in jt.models("digits")] == [2, 1]
    monkeypatch.setenv("JUPYTER_TRAINER_ADMIN_GROUP", grp.getgrgid(os.getegid()).gr_name)
    with pytest.raises(NotOwner, match="can delete it with force=True"):
        jt.get_model("digits@2").delete()
    jt.get_model("digits@2").delete(force=True)
    assert [m.version for m in jt.models("digits")] == [1]


def test_a_damaged_version_can_still_be_deleted(run, home):
    run.register_model("digits", "model.pt")
    folder = run.register_model("digits", "model.pt").folder
    writable(folder)
    (folder / "lineage.json").write_text("{not json")
    model = jt.get_model("digits@2")
    assert model.owner  # the owner of its folder
    model.delete()
    assert index(home) == [("digits", 1)] and not folder.exists()
    lost = run.register_model("digits", "model.pt").folder  # 3
    writable(lost)
    (lost / "lineage.json").unlink()
    with pytest.raises(ModelNotFound):
        jt.get_model("digits@3")
    done = cli("models", "delete", "digits@3", "--yes")
    assert done.returncode == 0 and done.stdout == "deleted digits@3; digits has versions 1 now\n"
    assert not lost.exists() and index(home) == [("digits", 1)]


def test_a_version_that_is_a_link_is_removed_not_followed(run, home, tmp_path):
    run.register_model("digits", "model.pt")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "lineage.json").write_text(json.dumps({"user": "x"}))
    (elsewhere / "keep.txt").write_text("keep")
    (home / "models" / "digits" / "2").symlink_to(elsewhere)
    jt.delete_model("digits@2", force=True)
    assert not (home / "models" / "digits" / "2").is_symlink()
    assert sorted(p.name for p in elsewhere.iterdir()) == ["keep.txt", "lineage.json"]
    for bad in ("../digits@1", "digits/1", "digits@0", "digits@-1", ".deleted.json@1"):
        with pytest.raises(SpecError):
            jt.delete_model(bad)
    assert [m.version for m in jt.models("digits")] == [1]


RACE = textwrap.dedent("""
    import os, sys, time
    import jupyter_trainer as jt
    from jupyter_trainer import api
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.001)
    if sys.argv[2] == "register":
        print(api.get_run(sys.argv[3]).register_model("digits", "tok").version)
    else:
        print(jt.delete_model(sys.argv[3]))
""")


def test_deletes_and_registrations_at_once_keep_the_index_and_the_numbers(run, home, tmp_path):
    for _ in range(4):
        run.register_model("digits", "model.pt")
    go = tmp_path / "go"
    jobs = [
        ("delete", "digits@1"),
        ("delete", "digits@3"),
        ("delete", "digits@3"),
        ("register", run.id),
        ("register", run.id),
    ]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACE, str(go), *job],
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for job in jobs
    ]
    go.touch()
    results = [proc.communicate(timeout=120) for proc in procs]
    codes = [proc.returncode for proc in procs]
    assert codes[0] == 0 and sorted(codes[1:3]) == [0, 1] and codes[3:] == [0, 0], results
    failed = [err for code, (_, err) in zip(codes, results) if code]
    assert len(failed) == 1 and "has no version 3" in failed[0], results  # deleted only once
    registered = sorted(
        int(out) for (out, _), (kind, _) in zip(results, jobs) if kind == "register"
    )
    assert registered == [5, 6]
    assert [m.version for m in jt.models("digits")] == [6, 5, 4, 2]
    assert index(home) == [("digits", v) for v in (2, 4, 5, 6)]
    gone = json.loads((home / "models" / "digits" / ".deleted.json").read_text())
    assert sorted(gone) == ["1", "3"]
    assert not [
        p
        for p in (home / "models" / "digits").iterdir()
        if p.name.startswith(".") and p.name != ".deleted.json"
    ]
    done = cli("doctor", "--json")  # the made run's code hash is a stand-in: runs aside
    assert [f for f in json.loads(done.stdout)["findings"] if f["run_id"] is None] == []


def test_cli_models_delete(run, home, tmp_path, monkeypatch):
    for _ in range(2):
        run.register_model("digits", "model.pt")
    done = cli("models", "delete", "digits@1")
    assert done.returncode == 2 and done.stderr.strip() == (
        f"jupyter-trainer: error: models delete: this deletes digits@1: digits@1 (1 file, 7 bytes, "
        f"from run {run.id}); it cannot be undone: add --yes to delete"
    )
    assert [m.version for m in jt.models("digits")] == [2, 1]
    done = cli("models", "delete", "digits@1", "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "deleted digits@1; digits has versions 2 now\n"
    done = cli("models", "delete", "digits")
    assert (
        done.returncode == 2
        and "say which version of digits to delete (digits@N; it has 2), or add --all"
        in done.stderr
    )
    forge(
        jt.get_model("digits@2"),
        jt.get_model("digits@2").lineage["files"],
        user="bob",
        owner={"user": "bob", "uid": 4243, "hub_user": None},
    )
    done = cli("models", "delete", "digits", "--all", "--yes")
    assert done.returncode == 2 and "digits@2 by bob: registered by another user" in done.stderr
    done = cli("models", "delete", "digits", "--all", "--yes", "--force")
    assert done.returncode == 2 and "only members of the workspace's admin group" in done.stderr
    monkeypatch.setenv("JUPYTER_TRAINER_ADMIN_GROUP", grp.getgrgid(os.getegid()).gr_name)
    done = cli("models", "delete", "digits", "--all", "--yes", "--force", "--json")
    assert done.returncode == 0 and json.loads(done.stdout) == {"name": "digits", "deleted": [2]}
    assert ModelStore(home).rows() == []
    done = cli("models", "delete", "digits@1", "--yes")
    assert done.returncode == 2 and "no model 'digits'" in done.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ("register", "RUN", "-bad", "model.pt"),
            "register: invalid model name '-bad': a model name is 1-128 letters",
        ),
        (("models", "register", "RUN", "-bad", "model.pt"), "invalid model name '-bad'"),
        (("models", "show", "-bad"), "show: invalid model name '-bad'"),
        (("models", "download", "-bad", "dest"), "invalid model name '-bad'"),
        (("models", "delete", "-bad", "--yes"), "delete: invalid model name '-bad'"),
        (("register", "-x", "m", "model.pt"), "register: invalid run id '-x'"),
        (
            ("register", "RUN", "m", "-odd.pt"),
            "'-odd.pt' is taken for an option; give a path that starts with '-' as ./-odd.pt",
        ),
        (("models", "download", "m", "-out"), "give a folder that starts with '-' as ./-out"),
    ],
)
def test_a_dashed_word_says_what_is_wrong_with_it(run, args, message):
    done = cli(*(run.id if a == "RUN" else a for a in args))
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "required" not in done.stderr and "Traceback" not in done.stderr


def test_models_download_refuses_an_empty_dest(run, tmp_path):
    run.register_model("digits", "model.pt")
    here = tmp_path / "cwd"
    here.mkdir()
    done = cli("models", "download", "digits", "", cwd=here)
    assert done.returncode == 2 and done.stderr.strip() == (
        "jupyter-trainer: error: DEST is empty: give the folder to copy into ('.' for the "
        "current folder)"
    )
    assert list(here.iterdir()) == []
    done = cli("models", "download", "digits", ".", cwd=here)
    assert done.returncode == 0 and (here / "model.pt").read_bytes() == b"weights"


def test_magic_models_delete(ip, run, capsys):
    run.register_model("digits", "model.pt")
    run.register_model("digits", "model.pt")
    result = ip.run_cell("%train models delete digits@2")
    assert not result.success and "add --yes to delete" in str(result.error_in_exec)
    assert ip.run_cell("%train models delete digits@2 --yes").success
    assert capsys.readouterr().out.endswith("deleted digits@2; digits has versions 1 now\n")
    assert ip.run_cell("%train models delete digits --all --yes").success
    assert jt.models() == []
    capsys.readouterr()
    assert ip.run_cell("%train models delete --help").success
    shown = capsys.readouterr().out
    assert "%train models delete [-h]" in shown and "NAME@V|NAME" in shown and "--yes" in shown
