"""A run's files: ``Run.files()``, ``Run.download()``, ``jupyter-trainer files/download`` and
``%train files/download``, on real runs with nested outputs, links and hostile names."""

from __future__ import annotations

import json
import subprocess

import pytest
from support.jt_cli import CLI, cli

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import SpecError, StoreError
from jupyter_trainer.store.outputs import RunFile

WEIRD = 'it\'s "odd"; $(rm -rf ~) *.txt'
CODE = f"""
import os
from jupyter_trainer import runtime as jt
out = jt.outputs_dir
(out / "model.pt").write_bytes(b"weights" * 100)
for step in (1, 2):
    (out / "ckpt" / f"step-{{step}}").mkdir(parents=True)
    (out / "ckpt" / f"step-{{step}}" / "w.bin").write_bytes(bytes([step]) * step * 10)
(out / {WEIRD!r}).write_text("odd")
os.symlink("model.pt", out / "alias.pt")
os.symlink(os.environ["OUTSIDE"], out / "outside.pt")
os.symlink("/", out / "root")
"""


@pytest.fixture
def run(home, tmp_path, monkeypatch) -> api.Run:
    outside = tmp_path / "secret.pt"
    outside.write_text("not the run's")
    monkeypatch.setenv("OUTSIDE", str(outside))
    return api.submit(CODE, launcher="python", name="files", wait=True)


def test_files_lists_the_outputs_with_sizes(run):
    assert run.files() == [
        RunFile("alias.pt", 700),
        RunFile("ckpt/step-1/w.bin", 10),
        RunFile("ckpt/step-2/w.bin", 20),
        RunFile(WEIRD, 3),
        RunFile("model.pt", 700),
    ]
    assert run.files()[0].to_dict() == {"path": "alias.pt", "size": 700}


@pytest.mark.parametrize(
    "pattern, expected",
    [
        ("*.pt", ["alias.pt", "model.pt"]),
        ("model.pt", ["model.pt"]),
        ("ckpt", ["ckpt/step-1/w.bin", "ckpt/step-2/w.bin"]),
        ("ckpt/**/*.bin", ["ckpt/step-1/w.bin", "ckpt/step-2/w.bin"]),
        ("**/w.bin", ["ckpt/step-1/w.bin", "ckpt/step-2/w.bin"]),
        ("ckpt/step-[2]", ["ckpt/step-2/w.bin"]),
        ("./ckpt/*-1/*", ["ckpt/step-1/w.bin"]),
        (WEIRD, [WEIRD]),
        ("**", ["alias.pt", "ckpt/step-1/w.bin", "ckpt/step-2/w.bin", WEIRD, "model.pt"]),
    ],
)
def test_download_copies_what_the_pattern_names(run, tmp_path, pattern, expected):
    dest = tmp_path / "dest dir"
    written = run.download(pattern, dest)
    assert written == [dest / p for p in expected]
    for rel in expected:
        assert (dest / rel).read_bytes() == (run.outputs / rel).read_bytes()
        assert not (dest / rel).is_symlink()
    on_disk = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert on_disk == sorted(expected)


def test_download_replaces_an_existing_file(run, tmp_path):
    (tmp_path / "model.pt").write_text("old")
    assert run.download("model.pt", tmp_path) == [tmp_path / "model.pt"]
    assert (tmp_path / "model.pt").read_bytes() == b"weights" * 100


@pytest.mark.parametrize(
    "pattern, message",
    [
        ("", "non-empty path"),
        ("../spec.json", "leaves the run's outputs/"),
        ("ckpt/../../state.json", "leaves the run's outputs/"),
        ("/etc/passwd", "leaves the run's outputs/"),
        ("outside.pt", "'outside.pt' names no file.*it has alias.pt, ckpt/step-1/w.bin"),
        ("root/etc/passwd", "names no file"),
        ("*.onnx", r"'\*.onnx' matches no file in the run's outputs/; it has alias.pt"),
    ],
)
def test_bad_patterns_are_refused_and_nothing_is_written(run, tmp_path, pattern, message):
    dest = tmp_path / "dest"
    with pytest.raises(SpecError, match=message):
        run.download(pattern, dest)
    assert not dest.exists()


def test_a_run_without_outputs(home, tmp_path):
    empty = api.submit("print('nothing')", launcher="python", wait=True)
    assert empty.files() == []
    with pytest.raises(SpecError, match="outputs/ is empty"):
        empty.download("*", tmp_path / "d")


def test_cli_files_and_download(run, tmp_path):
    listed = cli("files", run.id)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["SIZE", "PATH"] and lines[-1] == "5 files, 1.4 KiB"
    assert any(line.endswith("ckpt/step-2/w.bin") for line in lines)
    rows = json.loads(cli("files", run.id, "--json").stdout)
    assert rows[1] == {"path": "ckpt/step-1/w.bin", "size": 10}
    done = cli("download", run.id, "ckpt/*/w.bin", str(tmp_path / "d"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        str(tmp_path / "d/ckpt/step-1/w.bin"),
        str(tmp_path / "d/ckpt/step-2/w.bin"),
    ]
    bad = cli("download", run.id, "../*", str(tmp_path / "e"))
    assert bad.returncode == 2 and "leaves the run's outputs/" in bad.stderr
    assert not (tmp_path / "e").exists()
    missing = cli("files", "no-such-run")
    assert missing.returncode == 2 and "no run 'no-such-run'" in missing.stderr


def test_magic_files_and_download(ip, run, tmp_path, capsys):
    capsys.readouterr()
    assert ip.run_cell(f"%train files {run.id}").success
    assert "model.pt" in capsys.readouterr().out
    dest = tmp_path / "from magic"
    assert ip.run_cell(f"%train download {run.id} '*.pt' '{dest}'").success
    assert capsys.readouterr().out.splitlines() == [str(dest / "alias.pt"), str(dest / "model.pt")]
    result = ip.run_cell(f"%train download {run.id} nothing.bin '{dest}'")
    assert not result.success and "names no file" in str(result.error_in_exec)
    capsys.readouterr()
    assert ip.run_cell("%train help").success
    shown = capsys.readouterr().out
    assert "the files of a run's outputs/" in shown and "copy files of a run's outputs/" in shown


def test_download_never_follows_a_link_inside_dest(run, tmp_path):
    """DEST (a shared folder) already holds ckpt -> another user's folder: nothing is
    written through it, and a link where a file goes is replaced, not written through."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "model.pt").write_text("theirs")
    dest = tmp_path / "shared"
    dest.mkdir()
    (dest / "ckpt").symlink_to(victim)
    with pytest.raises(
        StoreError,
        match=r"cannot write ckpt/step-1/w.bin into .*shared: ckpt "
        r"is a link \(or a file\) where a folder is needed",
    ):
        run.download("ckpt", dest)
    assert sorted(p.name for p in victim.iterdir()) == ["model.pt"]
    (dest / "model.pt").symlink_to(victim / "model.pt")
    assert run.download("model.pt", dest) == [dest / "model.pt"]
    assert not (dest / "model.pt").is_symlink() and (victim / "model.pt").read_text() == "theirs"


def test_an_empty_dest_is_refused_not_taken_for_the_current_folder(run, tmp_path, monkeypatch):
    here = tmp_path / "cwd"
    here.mkdir()
    monkeypatch.chdir(here)
    with pytest.raises(SpecError, match="DEST is empty: give the folder to copy into"):
        run.download("model.pt", "")
    done = subprocess.run(
        [*CLI, "download", run.id, "model.pt", ""],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=here,
    )
    assert done.returncode == 2 and done.stderr.strip() == (
        "jupyter-trainer: error: DEST is empty: give the folder to copy into ('.' for the "
        "current folder)"
    )
    assert list(here.iterdir()) == []


def test_cli_files_escapes_names_that_are_not_printable(home, tmp_path):
    """An output file's name may hold a newline or an ANSI escape: `files` shows it on one
    line, escaped as repr writes it, and so does `download` and a message that lists it."""
    hostile = ["two\nlines.txt", "\x1b[2J\x1b[31mred.txt", "back\\slash.txt"]
    run = api.submit(
        "from jupyter_trainer import runtime as jt\n"
        f"for name in {hostile!r}:\n"
        "    (jt.outputs_dir / name).write_text('x')\n",
        launcher="python",
        name="names",
        wait=True,
    )
    assert sorted(f.path for f in run.files()) == sorted(hostile)
    listed = cli("files", run.id)
    assert listed.returncode == 0, listed.stderr
    assert "\x1b" not in listed.stdout
    lines = listed.stdout.splitlines()
    assert len(lines) == 5 and lines[-1] == "3 files, 3 bytes"  # header, 3 files, total
    assert {line.split(maxsplit=2)[2] for line in lines[1:4]} == {
        "two\\nlines.txt",
        "\\x1b[2J\\x1b[31mred.txt",
        "back\\\\slash.txt",
    }
    assert json.loads(cli("files", run.id, "--json").stdout)[0]["path"] in hostile
    done = cli("download", run.id, "*.txt", str(tmp_path / "d"))
    assert done.returncode == 0 and "\x1b" not in done.stdout
    assert len(done.stdout.splitlines()) == 3
    missing = cli("download", run.id, "nothing.bin", str(tmp_path / "e"))
    assert missing.returncode == 2 and "\x1b" not in missing.stderr
    assert len(missing.stderr.splitlines()) == 1 and "two\\nlines.txt" in missing.stderr
