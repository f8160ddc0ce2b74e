"""``--sweep-file`` names a regular file: a FIFO (or a device) is refused at once, never
waited on."""

from __future__ import annotations

import os
import subprocess

import pytest
from support.jt_cli import CLI


def test_a_fifo_as_the_sweep_file_is_refused_at_once(home, tmp_path):
    fifo = tmp_path / "space.yaml"
    os.mkfifo(fifo)
    (tmp_path / "train.py").write_text(
        "from jupyter_trainer import runtime as jt\njt.log(step=0, score=1.0)\n"
    )
    argv = [*CLI, "sweep", "start"]
    argv += [str(tmp_path / "train.py"), "--sweep-file", str(fifo), "--metric", "score"]
    try:
        done = subprocess.run(
            argv + ["--launcher", "python"], capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired:
        pytest.fail("a FIFO given as the sweep file was waited on")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"the sweep space file {fifo} is not a regular file" in done.stderr, done.stderr
    assert not (home / "sweeps").exists()
