"""%%train driven in a real IPython shell, running real torchrun/mpirun jobs."""

from __future__ import annotations

import json
import shlex

import pytest
from conftest import launched_by, leftover

from jupyter_trainer.api import runs as api
from jupyter_trainer.store import Store


def run_cell(ip, source: str):
    result = ip.run_cell(source, store_history=True)
    return result


def only_run(home) -> api.Run:
    runs = api.runs(home=home)
    assert len(runs) == 1, runs
    return runs[0]


def test_cell_uses_notebook_params_helpers_and_imports(ip, home, capsys, launch_mode):
    assert run_cell(ip, "lr = 0.05\nepochs = 3\nunused = 'x'").success
    assert run_cell(
        ip, "import numpy as np\ndef make_model(hidden):\n    return np.full(hidden, lr)\n"
    ).success
    result = run_cell(
        ip,
        """%%train --procs 2 --name digits -p "extra=[1, 2]"
import torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group()
w = make_model(4)
for step in range(epochs):
    jt.log(step=step, lr_sum=float(w.sum()), rank_seen=jt.rank)
    jt.progress(step + 1, epochs)
(jt.outputs_dir / f"rank{jt.rank}.txt").write_text(f"{jt.rank}/{jt.world_size} {extra}")
dist.destroy_process_group()
""",
    )
    assert result.success, result.error_in_exec
    run = result.result
    assert isinstance(run, api.Run) and run.status == "completed"
    spec = json.loads((run.path / "spec.json").read_text())
    assert spec["params"] == {"lr": 0.05, "epochs": 3, "extra": [1, 2]}
    assert spec["launch"] == {
        "launcher": "torchrun",
        "nodes": 1,
        "procs": 2,
        "backend": None,
        "max_restarts": 0,
        **({"hot": True} if launch_mode == "hot" else {}),
    }
    assert launched_by(run) == launch_mode
    store = Store(home)
    for rank in (0, 1):
        events, _ = store.read_events(run.id, rank)
        metrics = [e for e in events if e["kind"] == "metric"]
        assert [e["step"] for e in metrics] == [0, 1, 2]
        assert all(
            e["values"] == {"lr_sum": pytest.approx(0.2), "rank_seen": rank} for e in metrics
        )
        # the rank's last progress event: its memory sampler may write a system event after it
        progress = [e for e in events if e["kind"] == "progress"]
        assert [(e["done"], e["total"]) for e in progress] == [(1, 3), (2, 3), (3, 3)]
        assert (run.outputs / f"rank{rank}.txt").read_text() == f"{rank}/2 [1, 2]"
    out = capsys.readouterr().out
    assert f"run {run.id} completed" in out and "lr_sum" in out
    launch_line = "· torchrun, hot ·" if launch_mode == "hot" else "· torchrun ·"
    assert launch_line in out, out


def test_hostile_param_values_arrive_unchanged(ip, home):
    hostile = '\'; rm -rf ~; echo "$(whoami)" `id` \\n'
    ip.user_ns["nb_value"] = hostile
    result = run_cell(
        ip,
        f"""%%train --launcher python -p {shlex.quote("cli_value=" + hostile)}
print(repr(nb_value))
print(repr(cli_value))
""",
    )
    assert result.success, result.error_in_exec
    log = result.result.logs(0)
    assert log.splitlines() == [repr(hostile), repr(hostile)]


def test_mpirun_init_process_group_reads_env(ip, home):
    result = run_cell(
        ip,
        """%%train --launcher mpirun --procs 2
import os
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print("rank", dist.get_rank(), "of", dist.get_world_size(), "sum", t.item(),
      "ompi", os.environ["OMPI_COMM_WORLD_RANK"])
dist.destroy_process_group()
""",
    )
    assert result.success, result.error_in_exec
    run = result.result
    assert run.status == "completed"
    for rank in (0, 1):
        assert f"rank {rank} of 2 sum 3.0 ompi {rank}" in run.logs(rank)
    assert "mpirun" in run.state["launcher"]["argv"][0]


def test_failing_rank_is_recorded_and_nothing_is_left(ip, home, launch_mode):
    count = ip.execution_count  # the In [n] of the cell below
    result = run_cell(
        ip,
        """%%train --procs 2 --name boom
import time
import torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group()
for step in range(100):
    jt.log(step=step, x=step)
    if step == 3 and jt.rank == 1:
        raise ValueError("bad batch at step 3")
    time.sleep(0.1)
""",
    )
    assert not result.success
    error = result.error_in_exec
    assert type(error).__name__ == "RunFailed" and error.failed_rank == 1
    assert "ValueError: bad batch at step 3" in error.traceback
    # The frame is the raise on the cell's line 9 as the editor numbers it (the %%train line
    # is line 1), not a line of the captured script.
    assert f"Cell In [{count}], line 9, in <module>" in error.traceback, error.traceback
    assert "cell.py" not in error.traceback
    run = only_run(home)
    state = run.state
    assert state["status"] == "failed" and state["failed_rank"] == 1
    assert state["error"] == "ValueError: bad batch at step 3"
    assert state["teardown"]["leftovers"] == []
    assert leftover(run.id) == []
    steps = [e["step"] for e in Store(home).iter_events(run.id, 1) if e["kind"] == "metric"]
    assert steps == [0, 1, 2, 3]
    assert launched_by(run) == launch_mode


@pytest.mark.parametrize(
    "line, message",
    [
        ("--procs 2 --bogus", "unrecognized arguments: --bogus"),
        ("--launcher deepspeed", "unknown launcher 'deepspeed'; choose one of torchrun"),
        ("--procs two", "%%train: --procs takes a whole number, not 'two' (`%%train --help` lists"),
        ("--prcs 2", "unrecognized arguments: --prcs 2; did you mean --procs?"),
        ("--backend nccl", "--backend nccl needs CUDA GPUs"),
        ("--nodes 2", "--nodes must be 1"),
        ("-p 1x=3", "invalid parameter '1x=3'"),
        ("--target nowhere", "unknown target 'nowhere'; available: local"),
        ("--source /does/not/exist", "/does/not/exist"),
        ("--env missing", "unknown environment 'missing'"),
    ],
)
def test_bad_input_is_refused_and_launches_nothing(ip, home, line, message):
    result = run_cell(ip, f"%%train {line}\nprint('should not run')")
    assert not result.success
    assert message in str(result.error_in_exec)
    assert "\n" not in str(result.error_in_exec)  # one line, never argparse's usage block
    assert api.runs(home=home) == []
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


def test_uncarriable_objects_are_named_and_nothing_is_launched(ip, home, tmp_path):
    ip.user_ns["fh"] = open(tmp_path / "data.csv", "w")
    ip.user_ns["big"] = bytes(9 * 1024 * 1024)
    try:
        result = run_cell(ip, "%%train --procs 2\nprint(fh.name, len(big))")
    finally:
        ip.user_ns["fh"].close()
    assert not result.success
    message = str(result.error_in_exec)
    assert "fh" in message and "open file" in message
    assert "big" in message and "MiB" in message
    assert api.runs(home=home) == []


def test_no_wait_returns_at_once_and_attach_follows(ip, home, capsys):
    result = run_cell(
        ip,
        """%%train --no-wait --launcher python --name bg
import time
from jupyter_trainer import runtime as jt
for i in range(20):
    jt.log(step=i, v=i)
    time.sleep(0.1)
""",
    )
    assert result.success
    run = result.result
    assert run.status in ("created", "preparing", "running")
    assert run_cell(ip, f"%train attach {run.id}").success
    assert run.status == "completed"
    out = capsys.readouterr().out
    assert f"run {run.id} completed" in out and "v " in out
    assert run.metrics()["v"][-1] == (19, 19)


def test_management_commands(ip, home, capsys):
    run = api.submit("print('hello from the run')", launcher="python", name="mgmt", wait=True)
    capsys.readouterr()
    assert run_cell(ip, "%train runs").success
    assert run.id in capsys.readouterr().out
    assert run_cell(ip, f"%train logs {run.id}").success
    assert "hello from the run" in capsys.readouterr().out
    assert run_cell(ip, "%train targets").success
    assert "local" in capsys.readouterr().out
    result = run_cell(ip, "%train attach ../../etc")
    assert not result.success and "invalid run id" in str(result.error_in_exec)
    result = run_cell(ip, f"%train cancel {run.id}")
    assert not result.success and "already ended (completed)" in str(result.error_in_exec)


@pytest.mark.parametrize(
    "cell, line",
    [
        ("%%train --launcher python\nx = 1\nfor\n", "line 3: invalid syntax"),
        (
            "%%train --launcher python --sweep x=uniform(0,1) --trials 2 --metric y\ny = x\nfor\n",
            "line 3: invalid syntax",
        ),
        ("%%train --launcher python\nx = 1\n\n!nvidia-smi\n", "line 4: get_ipython().system"),
    ],
)
def test_capture_errors_name_the_line_the_editor_shows(ip, home, cell, line):
    """The %%train line is line 1 of the cell in the editor's gutter."""
    result = run_cell(ip, cell)
    assert type(result.error_in_exec).__name__ == "CaptureError"
    assert line in str(result.error_in_exec), result.error_in_exec
    assert api.runs(home=home) == []
