"""The model registry: versions copied out of real runs with their lineage, which outlive
the runs; concurrent registrations; refused paths and names; the index healing; the CLI
and ``%train`` forms."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from support.jt_cli import cli

import jupyter_trainer as jt
from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import ModelNotFound, SpecError, StoreError
from jupyter_trainer.core.spec import CodeSpec, EnvSpec, RunSpec
from jupyter_trainer.store import Store, outputs
from jupyter_trainer.store.models import ModelStore
from jupyter_trainer.store.workspace import INDEX_ENV

TRAIN = """
from jupyter_trainer import runtime as jt
for step in range(3):
    jt.log(step=step, loss=lr / (step + 1), note=f"step {step}")
(jt.outputs_dir / "model.pt").write_bytes(str(lr).encode() * 1000)
(jt.outputs_dir / "tok" / "vocab").mkdir(parents=True)
(jt.outputs_dir / "tok" / "config.json").write_text('{"lr": %s}' % lr)
(jt.outputs_dir / "tok" / "vocab" / "words.txt").write_text("a\\nb\\n")
"""


def train(lr: float, name: str = "train") -> api.Run:
    return api.submit(
        TRAIN, launcher="python", name=name, params={"lr": lr}, namespace={"lr": lr}, wait=True
    )


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def registered_versions(home: Path) -> list[str]:
    return sorted(str(p.relative_to(home / "models")) for p in (home / "models").glob("*/*"))


def test_two_versions_from_two_runs_outlive_the_first_run(index_home, tmp_path):
    store = Store(index_home)
    first, second = train(0.5, "first"), train(0.25, "second")
    v1 = first.register_model("digits", "model.pt", tags={"stage": "dev", "epochs": 3})
    v2 = second.register_model("digits", "model.pt")
    assert (v1.version, v2.version) == (1, 2)
    original = (first.outputs / "model.pt").read_bytes()
    store.delete(first.id)
    assert not first.path.exists()

    model = jt.get_model("digits", version=1)
    assert model == v1 and model.run == first.id and model.path.read_bytes() == original
    assert not model.path.is_symlink() and model.path.stat().st_nlink == 1
    written = model.download(tmp_path / "dl")
    assert written == [tmp_path / "dl" / "model.pt"]
    assert written[0].read_bytes() == original
    assert model.files == [outputs_file("model.pt", original)]
    assert sha256(written[0]) == model.lineage["files"][0]["sha256"]

    lineage = model.lineage
    assert lineage["run_id"] == first.id and lineage["run_name"] == "first"
    assert lineage["run_status"] == "completed" and lineage["params"] == {"lr": 0.5}
    assert lineage["metrics"] == {"loss": 0.5 / 3, "note": "step 2"}
    assert lineage["code_hash"] == second.spec.code.hash  # the same cell
    assert lineage["environment"]["lock"] is None and lineage["environment"]["python"]
    assert lineage["data"] == [] and lineage["sweep"] is None and lineage["trial"] is None
    assert lineage["tags"] == {"stage": "dev", "epochs": 3} and lineage["user"]
    assert lineage["source"] == "model.pt" and lineage["path"] == "model.pt"
    assert lineage["name"] == "digits" and lineage["version"] == 1 and lineage["created"] > 0
    assert json.loads((model.folder / "lineage.json").read_text()) == lineage

    assert jt.models() == [v2]
    assert jt.models("digits") == [v2, v1]
    assert jt.get_model("digits") == v2 and jt.get_model("digits@1") == v1
    assert v2.lineage["params"] == {"lr": 0.25} and v2.tags == {}


def outputs_file(path: str, data: bytes):
    from jupyter_trainer.api.models import ModelFile

    return ModelFile(path, len(data), hashlib.sha256(data).hexdigest())


def test_a_folder_is_registered_whole_and_read_only(home, tmp_path):
    run = train(0.1)
    model = run.register_model("tokenizer", "tok")
    assert model.path == model.folder / "tok" and model.path.is_dir()
    assert [f.path for f in model.files] == ["tok/config.json", "tok/vocab/words.txt"]
    for entry in model.files:
        copy = model.folder / entry.path
        assert sha256(copy) == entry.sha256 and copy.stat().st_size == entry.size
        assert not os.access(copy, os.W_OK) or os.geteuid() == 0
        assert copy.stat().st_mode & 0o222 == 0
    written = model.download(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in written] == [
        "tok/config.json",
        "tok/vocab/words.txt",
    ]
    assert (tmp_path / "tok/vocab/words.txt").read_text() == "a\nb\n"
    whole = run.register_model("everything", ".")
    assert whole.path.name == "outputs"
    assert [f.path for f in whole.files] == [
        "outputs/model.pt",
        "outputs/tok/config.json",
        "outputs/tok/vocab/words.txt",
    ]


def test_a_sweep_trial_records_its_sweep_and_environment_lock(home, store):
    env = EnvSpec(name="torch-cpu", version="v3", lock="lock-abc", prepared={"env_id": "env-123"})
    spec = RunSpec(
        name="trial",
        code=CodeSpec(entry="_jt/cell.py", hash="sha256:1"),
        env=env,
        params={"lr": 0.3},
        sweep="s-sweep-1",
        trial=4,
    )
    snapshot = store.staging_dir()
    snapshot.mkdir()
    run_id = store.create(spec, snapshot)
    (store.paths(run_id).outputs / "best.pt").write_bytes(b"best")
    lineage = api.get_run(run_id).register_model("swept", "best.pt").lineage
    assert (lineage["sweep"], lineage["trial"]) == ("s-sweep-1", 4)
    assert lineage["environment"] == {
        "name": "torch-cpu",
        "version": "v3",
        "lock": "lock-abc",
        "env_id": "env-123",
        "python": None,
    }
    assert lineage["metrics"] == {} and lineage["code_hash"] == "sha256:1"


REGISTER = textwrap.dedent("""
    import os, sys, time
    from jupyter_trainer import api
    while not os.path.exists(sys.argv[2]):
        time.sleep(0.001)
    print(api.get_run(sys.argv[1]).register_model("shared", "big.bin").version)
""")


def test_concurrent_registrations_get_distinct_versions(index_home, tmp_path):
    home = index_home
    run = train(0.1)
    (run.outputs / "big.bin").write_bytes(os.urandom(40 << 20))  # copied by the pipeline
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", REGISTER, run.id, str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    threads, versions = [], []
    for _ in range(2):
        threads.append(
            threading.Thread(
                target=lambda: versions.append(run.register_model("shared", "big.bin").version)
            )
        )
    go.touch()
    for thread in threads:
        thread.start()
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        versions.append(int(out))
    for thread in threads:
        thread.join()
    assert sorted(versions) == [1, 2, 3, 4, 5, 6]
    digest = sha256(run.outputs / "big.bin")
    for model in jt.models("shared"):
        assert [f.sha256 for f in model.files] == [digest] and sha256(model.path) == digest
    assert registered_versions(home) == [f"shared/{v}" for v in "123456"]
    assert not [p for p in (home / "models" / "shared").iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize(
    "name, path, message",
    [
        ("m", "../spec.json", "leaves the run's outputs/"),
        ("m", "tok/../../state.json", "leaves the run's outputs/"),
        ("m", "/etc/passwd", "leaves the run's outputs/"),
        ("m", "", "non-empty path"),
        ("m", "escape.pt", "is a link that leaves the run's outputs/"),
        ("m", "escape-dir", "is a link that leaves the run's outputs/"),
        ("m", "linked", "is a link to .*only files inside the run's outputs/"),
        (
            "m",
            "missing.pt",
            "'missing.pt' is not in the run's outputs/.*it has lineage.json, linked/ok.txt, model.pt",
        ),
        ("m", "lineage.json", "cannot be named lineage.json"),
        ("../m", "model.pt", "invalid model name"),
        ("a/b", "model.pt", "invalid model name"),
        (".hidden", "model.pt", "invalid model name"),
        ("", "model.pt", "invalid model name"),
    ],
)
def test_escapes_and_bad_names_are_refused_and_nothing_is_written(
    home, tmp_path, name, path, message
):
    run = train(0.1)
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key").write_text("secret")
    os.symlink(secret / "key", run.outputs / "escape.pt")
    os.symlink(secret, run.outputs / "escape-dir")
    (run.outputs / "linked").mkdir()
    (run.outputs / "linked" / "ok.txt").write_text("ok")
    os.symlink(secret / "key", run.outputs / "linked" / "key")
    (run.outputs / "lineage.json").write_text("{}")
    with pytest.raises(SpecError, match=message):
        run.register_model(name, path)
    assert registered_versions(home) == [] and jt.models() == []


@pytest.mark.parametrize(
    "tags, message",
    [
        ({"k": {"nested": 1}}, "a value is a string"),
        ({"": "x"}, "non-empty string"),
        (["novalue"], "KEY=VALUE"),
        ({"k": float("nan")}, "a value is a string"),
    ],
)
def test_bad_tags_are_refused(home, tags, message):
    run = train(0.1)
    with pytest.raises(SpecError, match=message):
        run.register_model("m", "model.pt", tags=tags)
    assert registered_versions(home) == []


def test_missing_models_and_versions_name_what_exists(home):
    with pytest.raises(ModelNotFound, match="no model 'nope'.*no model is registered"):
        jt.get_model("nope")
    train(0.1).register_model("digits", "model.pt")
    with pytest.raises(ModelNotFound, match=r"no model 'nope'.*registered models: digits"):
        jt.get_model("nope")
    with pytest.raises(ModelNotFound, match="model 'digits' has no version 3; it has version 1$"):
        jt.get_model("digits@3")
    with pytest.raises(ModelNotFound, match="no model 'nope'"):
        jt.models("nope")
    for bad in ("digits@0", "digits@x", "../digits"):
        with pytest.raises(SpecError):
            jt.get_model(bad)


def test_a_damaged_copy_is_found_on_download(home, tmp_path):
    model = train(0.1).register_model("digits", "model.pt")
    os.chmod(model.path, 0o644)
    model.path.write_bytes(b"tampered")
    with pytest.raises(StoreError, match="does not match its recorded sha256"):
        model.download(tmp_path)
    assert not (tmp_path / "model.pt").exists()


def test_the_index_heals_from_the_folders(home, caplog):
    run = train(0.1)
    run.register_model("a", "model.pt", tags={"t": "1"})
    run.register_model("a", "tok")
    run.register_model("b", "model.pt")
    before = ModelStore(home).rows()
    (home / "models.db").unlink()
    assert ModelStore(home).rows() == before
    (home / "models.db").write_bytes(b"not a database" * 100)
    assert [(r["name"], r["version"], r["tags"]) for r in ModelStore(home).rows()] == [
        ("a", 2, {}),
        ("a", 1, {"t": "1"}),
        ("b", 1, {}),
    ]
    assert list(home.glob("models.db.corrupt-*")) and "model index" in caplog.text
    assert run.register_model("a", "model.pt").version == 3
    with sqlite3.connect(home / "models.db") as conn:
        assert conn.execute("SELECT COUNT(*) FROM models").fetchone()[0] == 4


def test_a_dropped_model_table_on_postgresql_heals_from_the_folders(
    home, pg_url, monkeypatch, caplog
):
    monkeypatch.setenv(INDEX_ENV, pg_url)
    run = train(0.1)
    run.register_model("a", "model.pt", tags={"t": "1"})
    run.register_model("b", "model.pt")
    before = ModelStore(home).rows()
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP TABLE models")
    assert ModelStore(home).rows() == before
    assert "model index" in caplog.text and "rebuilt it from 2 model folders" in caplog.text
    assert run.register_model("a", "model.pt").version == 2
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT COUNT(*) FROM models").fetchone()[0] == 3


def test_copies_fall_back_when_the_kernel_cannot_copy(tmp_path, monkeypatch):
    data = os.urandom((32 << 20) + 12345)
    (tmp_path / "src").write_bytes(data)
    expected = hashlib.sha256(data).hexdigest()
    assert outputs.copy_hashed(tmp_path / "src", tmp_path / "a") == expected

    def refuse(*_args):
        raise OSError(errno.EXDEV, "cross-device")

    monkeypatch.setattr(outputs, "_by_copy_file_range", refuse)
    assert outputs.copy_hashed(tmp_path / "src", tmp_path / "b") == expected
    monkeypatch.setattr(outputs, "_by_sendfile", refuse)
    assert outputs.copy_hashed(tmp_path / "src", tmp_path / "c") == expected
    for name in "abc":
        assert (tmp_path / name).read_bytes() == data
    with pytest.raises(FileExistsError):
        outputs.copy_hashed(tmp_path / "src", tmp_path / "a")


def test_cli_register_models_show_download(index_home, tmp_path):
    first, second = train(0.5), train(0.25)
    done = cli("register", first.id, "digits", "model.pt", "--tag", "stage=dev")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"registered digits@1 from run {first.id}: 1 file, 2.9 KiB")
    done = cli("models", "register", second.id, "digits", "tok", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["version"] == 2
    listing = cli("models").stdout.splitlines()
    assert listing[0].split()[:3] == ["MODEL", "LATEST", "VERSIONS"]
    assert listing[1].split()[:4] == ["digits", "2", "2", second.id]
    rows = json.loads(cli("models", "list", "--json").stdout)
    assert [(r["version"], r["tags"]) for r in rows] == [(2, {}), (1, {"stage": "dev"})]
    shown = cli("models", "show", "digits@1").stdout
    assert shown.startswith("model digits@1 (versions 1, 2)")
    assert "lr=0.5" in shown and "stage=dev" in shown and first.id in shown
    assert hashlib.sha256((first.outputs / "model.pt").read_bytes()).hexdigest() in shown
    record = json.loads(cli("models", "show", "digits", "--json").stdout)
    assert record["version"] == 2 and record["run_id"] == second.id
    done = cli("models", "download", "digits@1", str(tmp_path / "d"))
    assert done.returncode == 0 and done.stdout.strip() == str(tmp_path / "d" / "model.pt")
    for args, message in [
        (("models", "show", "nope"), "no model 'nope'"),
        (("models", "show", "digits@9"), "has no version 9"),
        (("register", first.id, "x", "../spec.json"), "leaves the run's"),
        (("register", first.id, "x", "model.pt", "--tag", "a=1", "--tag", "a=2"), "given twice"),
        (("models", "drop"), "invalid choice"),
    ]:
        done = cli(*args)
        assert done.returncode == 2 and message in done.stderr, (args, done.stderr)


def test_magic_register_and_models(ip, home, tmp_path, capsys):
    run = train(0.5)
    capsys.readouterr()
    assert ip.run_cell(f"%train register {run.id} digits model.pt --tag note='a b'").success
    assert capsys.readouterr().out.startswith(f"registered digits@1 from run {run.id}")
    assert ip.run_cell(f"%train models register {run.id} digits tok").success
    capsys.readouterr()
    assert ip.run_cell("%train models").success
    assert "digits" in capsys.readouterr().out
    assert ip.run_cell("%train models show digits@1").success
    assert "note=a b" in capsys.readouterr().out
    assert ip.run_cell(f"%train models download digits '{tmp_path}'").success
    assert (tmp_path / "tok" / "config.json").read_text() == '{"lr": 0.5}'
    result = ip.run_cell("%train models show missing")
    assert not result.success and "no model 'missing'" in str(result.error_in_exec)
    capsys.readouterr()
    assert ip.run_cell("%train models --help").success  # the verbs, from the command table
    shown = capsys.readouterr().out
    assert "every model with its latest version" in shown and "a version's lineage" in shown
