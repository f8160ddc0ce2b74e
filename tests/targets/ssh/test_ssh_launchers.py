"""mpirun and horovodrun across the two ssh hosts: one launcher on node 0, which reaches node
1 over ssh itself (through the run's ``bin/ssh`` wrapper and hop config), Horovod with its
Gloo and its MPI controller, training with ``DistributedOptimizer``.

Open MPI is told to keep to loopback (the hosts are 127.0.0.2 and 127.0.0.3): on a real
cluster these variables are the user's to set in the target's ``env``, or not at all.
"""

from __future__ import annotations

import pytest
from conftest import leftover
from support.ssh_hosts import ADDRESSES, fail_with_logs
from support.workloads import HOROVOD_LINEAR

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import RunFailed


def test_mpirun_across_two_hosts(mpi_pair, home, tmp_path):
    code = (
        "import os, socket, torch, torch.distributed as dist\n"
        "from jupyter_trainer import runtime as jt\n"
        "dist.init_process_group('gloo')\nt = torch.ones(1)\ndist.all_reduce(t)\n"
        "print('mpi rank', os.environ['OMPI_COMM_WORLD_RANK'], 'jt', jt.rank, 'of',"
        " jt.world_size, 'sum', t.item(), 'dir', os.environ['JT_RUN_DIR'], flush=True)\n"
        "jt.log(step=0, sum=t.item())\n"
    )
    run = api.submit(code, target="pair", nodes=2, procs=2, launcher="mpirun", name="ssh-mpi")
    try:
        run.wait(timeout=180)
    except RunFailed:
        fail_with_logs(run, 4)
    state = run.state
    argv = state["launcher"]["argv"]
    assert argv[0] == "mpirun" and f"{ADDRESSES[0]}:2,{ADDRESSES[1]}:2" in argv
    assert [n["launcher"] for n in state["launcher"]["nodes"]] == [True, False]
    remote = str(tmp_path / "remote" / "runs" / run.id)
    for rank in range(4):
        assert f"mpi rank {rank} jt {rank} of 4 sum 4.0 dir {remote}" in run.logs(rank)
        assert run.metrics(rank)["sum"] == [(0, 4.0)]
    assert state["teardown"]["leftovers"] == [] and leftover(run.id) == []


@pytest.mark.parametrize("backend, flag", [(None, "--gloo"), ("mpi", "--mpi")], ids=["gloo", "mpi"])
def test_horovod_trains_across_two_hosts(mpi_pair, home, backend, flag):
    run = api.submit(
        HOROVOD_LINEAR,
        target="pair",
        nodes=2,
        procs=1,
        launcher="horovod",
        backend=backend,
        name=f"ssh-hvd-{flag.strip('-')}",
    )
    try:
        run.wait(timeout=240)
    except RunFailed:
        fail_with_logs(run, 2)
    state = run.state
    argv = state["launcher"]["argv"]
    assert argv[1:3] == ["-m", "horovod.runner.launch"] and flag in argv
    assert f"{ADDRESSES[0]}:1,{ADDRESSES[1]}:1" in argv
    for rank in range(2):
        log = run.logs(rank)
        # local rank 0 on each host: the ranks really are on two hosts
        assert (
            f"hvd rank {rank} size 2 local 0 jt {rank}/2 sum 3.0 same_params True learned True"
        ) in log, log
        assert [s for s, _ in run.metrics(rank)["loss"]] == list(range(30))
    assert state["teardown"]["leftovers"] == [] and leftover(run.id) == []


def test_cancel_mpirun_run_ends_ranks_on_both_hosts(mpi_pair, home):
    from conftest import wait_for

    code = "import time\nfrom jupyter_trainer import runtime as jt\njt.log(step=0, up=1)\ntime.sleep(600)\n"
    run = api.submit(
        code, target="pair", nodes=2, procs=1, launcher="mpirun", name="ssh-mpi-cancel"
    )
    wait_for(
        lambda: all(run.store.read_events(run.id, r)[0] for r in range(2)),
        timeout=120,
        what="both ranks to log",
    )
    # node 1's Open MPI daemon, started over ssh by mpirun, carries the run id as well
    assert any("orted" in line for line in leftover(run.id)), leftover(run.id)
    run.cancel(timeout=60)
    assert run.status == "canceled"
    assert run.state["teardown"]["leftovers"] == [] and leftover(run.id) == []
