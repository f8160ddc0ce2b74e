"""A data input's content hash on every Python the package supports (3.10 has no
``hashlib.file_digest``)."""

from __future__ import annotations

import hashlib

from jupyter_trainer.inputs.digest import CHUNK, file_sha256


def test_a_file_is_hashed_without_hashlib_file_digest(tmp_path, monkeypatch):
    data = bytes(range(256)) * (CHUNK // 256 * 2 + 3)  # more than two chunks, not whole
    path = tmp_path / "data.bin"
    path.write_bytes(data)
    monkeypatch.delattr(hashlib, "file_digest", raising=False)  # as on Python 3.10
    assert file_sha256(str(path)) == hashlib.sha256(data).hexdigest()
    empty = tmp_path / "empty.bin"
    empty.touch()
    assert file_sha256(str(empty)) == hashlib.sha256(b"").hexdigest()
