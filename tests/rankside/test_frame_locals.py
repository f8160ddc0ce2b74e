"""A failing rank's frames are saved with their local variables (``rankside/debug/frame_locals.py``):
capped reprs, arrays by shape, secret-looking names masked, a cell's lines as the editor
numbers them; ``Run.frames`` and ``jupyter-trainer show RUN --locals`` read them back."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import leftover

from jupyter_trainer.api import runs as api
from jupyter_trainer.rankside.debug import frame_locals

FAILING = """
import torch
from jupyter_trainer import runtime as jt

lr = 0.1
api_token = "s3cret-value"

def step(batch, lr):
    scale = lr * 2
    if jt.rank == 1:
        raise ValueError(f"bad batch of shape {tuple(batch.shape)}")
    return batch * scale

for i in range(3):
    step(torch.zeros(4, 3), lr)
"""


def test_the_failing_ranks_frames_keep_its_variables(home):
    run = api.submit(FAILING, procs=2, name="frames")
    run.wait(timeout=120, raise_on_failure=False)
    assert run.status == "failed" and run.state["failed_rank"] == 1
    frames = run.frames()
    assert [f["function"] for f in frames] == ["<module>", "step"]
    top, inner = frames
    assert (top["file"], top["line"]) == ("the cell", 15)  # the cell's own line numbers
    assert (inner["file"], inner["line"]) == ("the cell", 11)
    assert inner["locals"] == {
        "batch": "<Tensor shape=(4, 3) dtype=torch.float32 device=cpu>",
        "lr": "0.1",
        "scale": "0.2",
    }
    assert top["locals"]["i"] == "0" and top["locals"]["api_token"] == "***"
    assert "torch" not in top["locals"] and "step" not in top["locals"]  # modules, functions
    summary = subprocess.run(
        [sys.executable, "-m", "jupyter_trainer", "show", run.id],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert f"each frame's variables: jupyter-trainer show {run.id} --locals" in summary
    record = (run.path / "ranks" / "rank-1.json").read_text()
    assert "s3cret-value" not in record
    assert run.frames(rank=0) == []  # rank 0 was stopped, it did not raise
    assert leftover(run.id) == []

    shown = subprocess.run(
        [sys.executable, "-m", "jupyter_trainer", "show", run.id, "--locals"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        'File "the cell", line 15, in <module>',
        "    lr = 0.1",
        "    api_token = ***",
        "    i = 0",
        'File "the cell", line 11, in step',
        "    batch = <Tensor shape=(4, 3) dtype=torch.float32 device=cpu>",
        "    lr = 0.1",
        "    scale = 0.2",
    ]


def test_show_locals_of_a_run_that_did_not_raise_says_so(home):
    run = api.submit("print('fine')", launcher="python", wait=True)
    shown = subprocess.run(
        [sys.executable, "-m", "jupyter_trainer", "show", run.id, "--locals"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 1
    assert "no frames recorded: the run did not raise" in shown.stdout
    assert "(status completed)" in shown.stdout


class Loud:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_values_are_capped_shaped_and_never_raise():
    long = frame_locals.describe("x" * 5000)
    assert "..." in long and len(long) <= frame_locals.VALUE_CHARS
    assert len(frame_locals.describe(list(range(10_000)))) < 100  # reprlib shortens it
    assert frame_locals.describe(np.zeros((2, 5), dtype=np.float32)) == (
        "<ndarray shape=(2, 5) dtype=float32 device=cpu>"
    )
    assert frame_locals.describe(Loud()).startswith("<Loud instance at 0x")
    assert frame_locals.describe(np.float32) != ""  # a dtype class is not an array


@pytest.mark.parametrize(
    "name", ["token", "HF_TOKEN", "db_password", "aws_secret_access_key", "api_key", "Passwd"]
)
def test_secret_looking_names_are_masked_in_frames_and_in_mappings(name):
    namespace: dict = {}
    exec(f"def failing({name}, config):\n    raise KeyError('x')\n", namespace)
    try:
        namespace["failing"]("hunter2", {name: "hunter2", "lr": 0.5})
    except KeyError as exc:
        (frame,) = frame_locals.failure_frames(exc, "<string>")
    assert frame["locals"][name] == "***"
    assert (
        f"'{name}': '***'" in frame["locals"]["config"] and "'lr': 0.5" in frame["locals"]["config"]
    )
    assert "hunter2" not in json.dumps(frame)


def test_a_frame_keeps_at_most_max_locals_and_counts_the_rest():
    namespace: dict = {}
    body = "\n".join(f"    v{i} = {i}" for i in range(frame_locals.MAX_LOCALS + 5))
    exec(f"def many():\n{body}\n    raise ValueError('x')\n", namespace)
    try:
        namespace["many"]()
    except ValueError as exc:
        frames = frame_locals.failure_frames(exc, "<string>")
    assert len(frames[-1]["locals"]) == frame_locals.MAX_LOCALS
    assert frames[-1]["locals_left_out"] == 5
