"""The one atomic write (``rankside.host.atomic``): a reader sees the old file or the new one, a
failed write leaves the old file and no temporary one, and writers never share a temporary
file."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from jupyter_trainer.core.files import write_text_atomic
from jupyter_trainer.rankside.host.atomic import write_atomic, write_json_atomic
from jupyter_trainer.rankside.rank import rank_files


def test_replaces_the_file_whole_with_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("old")
    write_json_atomic(path, {"status": "running"}, mode=0o600)
    assert json.loads(path.read_text()) == {"status": "running"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    write_atomic(str(path), b"\x00bytes")
    assert path.read_bytes() == b"\x00bytes"
    assert os.listdir(tmp_path) == ["state.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    path.write_text('{"kept": true}')
    with pytest.raises(TypeError):
        write_json_atomic(path, {"not json": object()})
    with pytest.raises(TypeError):
        write_atomic(path, 42)  # type: ignore[arg-type]  # the wrong type on purpose
    assert path.read_text() == '{"kept": true}'
    assert os.listdir(tmp_path) == ["record.json"]


def test_writers_of_one_file_never_share_a_temporary_file(tmp_path: Path) -> None:
    """Two threads beat into one heartbeat file (a forked rank and its parent, say): with a
    temporary name of its own, each rename finds its file and every read is whole."""
    path = str(tmp_path / "events" / "rank-0.beat")
    errors: list[BaseException] = []

    def beat(n: int) -> None:
        try:
            for step in range(300):
                rank_files.write_beat(path, {"writer": n, "step": step, "pad": "x" * 2000})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=beat, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    reads = 0
    while any(t.is_alive() for t in threads):
        try:
            json.loads(Path(path).read_text())
            reads += 1
        except FileNotFoundError:
            pass
    for thread in threads:
        thread.join()
    assert errors == []
    assert os.listdir(tmp_path / "events") == ["rank-0.beat"]


def test_core_files_makes_the_folder(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "LATEST"
    write_text_atomic(path, "v1\n")
    assert path.read_text() == "v1\n"
