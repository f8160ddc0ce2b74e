"""Real Horovod runs through the package: ``horovodrun`` with the Gloo and the MPI controller.

scripts/setup.sh builds Horovod (scripts/build_horovod.sh), so these tests fail, not skip,
when it is missing: a skipped test would hide a launcher that does not work.
"""

from __future__ import annotations

import pytest
from conftest import leftover
from support.workloads import HOROVOD_LINEAR

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import RunFailed


@pytest.mark.parametrize("backend, flag", [(None, "--gloo"), ("mpi", "--mpi")], ids=["gloo", "mpi"])
def test_horovod_trains_and_allreduces(home, backend, flag):
    run = api.submit(
        HOROVOD_LINEAR,
        procs=2,
        launcher="horovod",
        backend=backend,
        name=f"hvd-{flag.strip('-')}",
        home=home,
    )
    try:
        run.wait(timeout=240)
    except RunFailed:
        pytest.fail(
            f"horovod run failed: {run.state.get('error')}\n--- rank 0\n{run.logs(0)}"
            f"\n--- rank 1\n{run.logs(1)}"
        )
    state = run.state
    assert state["status"] == "completed", state
    argv = state["launcher"]["argv"]
    assert argv[1:3] == ["-m", "horovod.runner.launch"] and flag in argv
    for rank in (0, 1):
        log = run.logs(rank)
        assert (
            f"hvd rank {rank} size 2 local {rank} jt {rank}/2 sum 3.0 same_params True learned True"
        ) in log, log
        steps = [step for step, _ in run.metrics(rank)["loss"]]
        assert steps == list(range(30))
    assert leftover(run.id) == []


@pytest.mark.parametrize("backend", [None, "mpi"], ids=["gloo", "mpi"])
def test_failing_horovod_rank_fails_the_run_and_leaves_nothing(home, backend):
    code = """
import time
import torch
import horovod.torch as hvd
hvd.init()
hvd.allreduce(torch.ones(1), op=hvd.Sum)
if hvd.rank() == 1:
    raise RuntimeError("horovod rank 1 gave up")
time.sleep(2)
hvd.allreduce(torch.ones(1), op=hvd.Sum)     # rank 0 waits here for a rank that is gone
time.sleep(600)
"""
    run = api.submit(code, procs=2, launcher="horovod", backend=backend, name="hvd-boom", home=home)
    with pytest.raises(RunFailed) as info:
        run.wait(timeout=120)
    assert info.value.failed_rank == 1
    state = run.state
    assert state["status"] == "failed" and state["failed_rank"] == 1, state
    assert state["error"] == "RuntimeError: horovod rank 1 gave up"
    assert "horovod rank 1 gave up" in run.logs(1)
    assert state["teardown"]["leftovers"] == []
    assert leftover(run.id) == []
