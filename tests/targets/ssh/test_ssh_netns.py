"""The ssh target across two hosts with separate network stacks (network namespaces with
their own hostnames, see tests/support/ssh_netns.py): what 127.0.0.2/127.0.0.3 cannot show, that
the rendezvous address is one the other node really reaches and that ranks run "elsewhere".
"""

from __future__ import annotations

import pytest
from conftest import leftover
from support.ssh_netns import far, netns_hosts  # noqa: F401 (fixtures)

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import RunFailed

CODE = """
import os, socket, torch, torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group("gloo")
t = torch.tensor([float(jt.rank + 1)])
dist.all_reduce(t)
jt.log(step=0, total=t.item())
print("rank", jt.rank, "on", socket.gethostname(), "sum", t.item(), flush=True)
dist.barrier()
dist.destroy_process_group()
"""


def check(run, hosts, launcher):
    try:
        run.wait(timeout=180)
    except RunFailed:
        pytest.fail(f"{run.state.get('error')}\n" + "".join(run.logs(r) for r in range(2)))
    for rank in range(2):
        assert f"rank {rank} on node-{'ab'[rank]} sum 3.0" in run.logs(rank)
    records = run.store.rank_records(run.id)
    assert [records[r]["host"] for r in range(2)] == ["node-a", "node-b"]
    assert [n["address"] for n in run.state["launcher"]["nodes"]] == hosts.addresses
    assert run.state["teardown"]["leftovers"] == [] and leftover(run.id) == []


def test_torchrun_across_network_namespaces(far, netns_hosts):
    far()
    run = api.submit(CODE, target="far", nodes=2, procs=1, name="netns-ddp")
    check(run, netns_hosts, "torchrun")
    argv = run.state["launcher"]["argv"]
    assert f"--rdzv-endpoint={netns_hosts.addresses[0]}:" in " ".join(argv)


def test_mpirun_across_network_namespaces(far, netns_hosts):
    far(
        OMPI_MCA_oob_tcp_if_include="eth0",
        OMPI_MCA_btl="self,tcp",
        OMPI_MCA_btl_tcp_if_include="eth0",
    )
    run = api.submit(CODE, target="far", nodes=2, procs=1, launcher="mpirun", name="netns-mpi")
    check(run, netns_hosts, "mpirun")


TRAFFIC = """
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(2 << 20)  # 8 MiB
time.sleep(2.2)  # two samples first: the rates start at the second
for _ in range(24):
    dist.all_reduce(t)
    time.sleep(0.05)
time.sleep(1.5)
dist.destroy_process_group()
"""


def test_the_traffic_between_two_nodes_shows_as_their_network_rates(far):
    """What the ranks' all_reduce sends crosses each namespace's eth0, and each rank's node
    counts it; loopback is left out."""
    far()
    run = api.submit(TRAFFIC, target="far", nodes=2, procs=1, system_interval=0.5)
    run.wait(timeout=180)
    for rank in (0, 1):
        figures = run.system(rank=rank)
        for name in ("node_net_rx_bytes_per_s", "node_net_tx_bytes_per_s"):
            rates = figures[name]
            moved = sum(rate * (t - t0) for (t0, _), (t, rate) in zip(rates, rates[1:]))
            # on two ranks, each all_reduce of 8 MiB sends and receives 8 MiB on each node
            assert 150 << 20 <= moved <= 400 << 20, (rank, name, rates)
