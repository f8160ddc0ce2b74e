"""--launcher mpirun on a Kubernetes target with the TrainJob API, end to end against the fake
API server: the fake Trainer makes the MPI runtime's launcher and node jobs, its SSH key Secret
and hostfile; each pod has a network of its own; the launcher pod's real mpirun reaches the node
pod's real sshd (the runtime's own node command) over ssh and starts the ranks there."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time

import pytest
from conftest import REPO, wait_for
from support.kube_fake.fixtures import kube_cluster  # noqa: F401 (a fixture)
from support.kube_fake.images import OPENMPI_SSH
from support.kube_fake.testing import run_objects
from support.workloads import FAIL_RANK_3, GLOO_SLEEPER

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import RunFailed
from jupyter_trainer.targets.kubernetes.names import object_name
from jupyter_trainer.targets.registry import add_target

IMAGE = "example.org/trainer:1.0"
MPI_CLUSTER = {
    "trainjob_api": True,
    "pod_network": True,
    "images": {IMAGE: OPENMPI_SSH, "mpioperator/mpi-pi:openmpi": OPENMPI_SSH},
}
MPI = pytest.mark.parametrize("kube_cluster", [MPI_CLUSTER], indirect=True, ids=["mpi"])

ALLREDUCE = (
    "import time\nimport torch, torch.distributed as dist\n"
    "from jupyter_trainer import runtime as jt\n"
    "dist.init_process_group('gloo')\nt = torch.tensor([float(jt.rank + 1)])\n"
    "dist.all_reduce(t)\nfor step in range(40):\n"
    "    jt.log(step=step, total=t.item(), rank=jt.rank)\n    time.sleep(0.1)\n"
    "print(f'rank {jt.rank} of {jt.world_size} sum {t.item()}')\n"
)


def kube_target(home, cluster) -> None:
    """Pods have networks of their own: Gloo finds each pod's address from its hostname."""
    add_target(
        "kube",
        "kubernetes",
        home=home,
        replace=True,
        kubeconfig=str(cluster.kubeconfig),
        image=IMAGE,
        python=sys.executable,
        api="trainjob",
        env={"PYTHONPATH": str(REPO)},
    )


def pod_networks(cluster) -> list[str]:
    """The network namespaces the fake kubelet made for this cluster's pods and still has."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [
        line.split()[0]
        for line in names.splitlines()
        if line.startswith(f"jtk{cluster.kubelet.network.tag}-")
    ]


def assert_nothing_left(state, cluster) -> None:
    """No pod, process, object or pod network of the run is left."""
    assert state["teardown"]["leftovers"] == []
    assert cluster.processes() == [] and run_objects(cluster) == []
    assert pod_networks(cluster) == []


def fake_objects(cluster, plural: str) -> dict[str, dict]:
    res = cluster.registry.find("", "v1", plural)
    return {o["metadata"]["name"]: o for o in cluster.store.list(res, cluster.namespace)[0]}


@MPI
def test_mpirun_two_nodes_by_two_gloo_completes_with_live_events_of_every_rank(home, kube_cluster):
    kube_target(home, kube_cluster)
    run = api.submit(ALLREDUCE, target="kube", nodes=2, procs=2, launcher="mpirun", name="kube-mpi")
    name = object_name(run.id)
    live = wait_for(
        lambda: (
            run.status == "running"
            and all(run.store.read_events(run.id, r)[0] for r in range(4))
            and run.state
        ),
        timeout=120,
        what="events of all 4 ranks while running",
    )
    assert live["status"] == "running"
    # What the Trainer's MPI plugin made, as the pods saw it while they ran.
    hostfile = fake_objects(kube_cluster, "configmaps")[f"{name}-mpi-hostfile"]["data"]["hostfile"]
    assert hostfile == (f"{name}-launcher-0-0.{name} slots=2\n{name}-node-0-0.{name} slots=2\n")
    secret = fake_objects(kube_cluster, "secrets")[f"{name}-mpi-ssh-auth"]
    assert base64.b64decode(secret["data"]["ssh-privatekey"]).startswith(
        b"-----BEGIN EC PRIVATE KEY"
    )
    pods = {
        p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"]: p
        for p in fake_objects(kube_cluster, "pods").values()
    }
    assert sorted(pods) == ["launcher", "node"]
    launcher_env = {
        e["name"]: e.get("value") for e in pods["launcher"]["spec"]["containers"][0]["env"]
    }
    assert launcher_env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert launcher_env["OMPI_MCA_orte_set_default_slots"] == "2"
    assert pods["node"]["spec"]["containers"][0]["command"] == ["/usr/sbin/sshd"]
    # The launcher runs our argv alone: none of the runtime's own args (/home/mpiuser/pi).
    launcher = pods["launcher"]["spec"]["containers"][0]
    assert launcher["args"][0] == "mpirun" and launcher["args"][-1] == "_jt/cell.py", launcher
    assert pods["launcher"]["status"]["podIP"] != pods["node"]["status"]["podIP"]

    run.wait(timeout=120)
    state = run.state
    assert state["status"] == "completed", state.get("error")
    hosts = {}
    for rank in range(4):
        assert f"rank {rank} of 4 sum 10.0" in run.logs(rank)
        assert [s for s, _ in run.metrics(rank)["total"]] == list(range(40))
        record = json.loads((run.path / "ranks" / f"rank-{rank}.json").read_text())
        hosts[rank] = record["host"]
    # Ranks 0 and 1 ran in the launcher pod (the runtime runs the launcher as a node), 2 and 3
    # in the node pod, started there through its sshd.
    assert hosts == {
        0: f"{name}-launcher-0-0",
        1: f"{name}-launcher-0-0",
        2: f"{name}-node-0-0",
        3: f"{name}-node-0-0",
    }
    launcher_log = (run.path / "logs" / "launcher.log").read_text()
    assert "Accepted publickey for root" in launcher_log
    assert_nothing_left(state, kube_cluster)


@MPI
def test_a_failing_rank_on_the_node_pod_fails_the_mpirun_run_naming_it(home, kube_cluster):
    kube_target(home, kube_cluster)
    started = time.monotonic()
    run = api.submit(
        FAIL_RANK_3, target="kube", nodes=2, procs=2, launcher="mpirun", name="kube-mpi-fail"
    )
    with pytest.raises(RunFailed) as info:
        run.wait(timeout=120)
    state = run.state
    assert state["status"] == "failed" and state.get("failed_rank") == 3, json.dumps(
        state, indent=1
    )
    assert info.value.failed_rank == 3
    assert state["error"] == "KeyError: 'missing column on node 1'"
    assert "raise KeyError('missing column on node 1')" in (state.get("traceback") or "")
    assert time.monotonic() - started < 90
    assert_nothing_left(state, kube_cluster)


@MPI
def test_cancel_leaves_no_rank_sshd_session_or_mpirun(home, kube_cluster):
    kube_target(home, kube_cluster)
    run = api.submit(
        GLOO_SLEEPER, target="kube", nodes=2, procs=2, launcher="mpirun", name="kube-mpi-cancel"
    )
    wait_for(
        lambda: all(run.store.read_events(run.id, r)[0] for r in range(4)),
        timeout=120,
        what="all four ranks to log",
    )
    running = kube_cluster.processes()
    programs = [(p["pod"].rsplit("-", 4)[-4], " ".join(p["cmdline"])) for p in running]
    assert any(pod == "launcher" and "mpirun" in cmd for pod, cmd in programs), programs
    assert any(pod == "node" and cmd.startswith("sshd:") for pod, cmd in programs), programs
    assert any(pod == "node" and "orted" in cmd for pod, cmd in programs), programs
    ranks = [pod for pod, cmd in programs if cmd.split()[1:3] == ["-u", "/jt/run/code/_jt/boot.py"]]
    assert ranks.count("launcher") >= 2 and ranks.count("node") >= 2, programs
    assert len(pod_networks(kube_cluster)) == 2
    run.cancel(timeout=90)
    state = run.state
    assert state["status"] == "canceled"
    assert_nothing_left(state, kube_cluster)
    pids = {p["pid"] for p in running}
    alive = [
        pid
        for pid in pids
        if subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode == 0
    ]
    assert alive == []


HVD = (
    "import time\nimport torch\nimport horovod.torch as hvd\n"
    "from jupyter_trainer import runtime as jt\nhvd.init()\n"
    "t = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)\n"
    "for step in range(10):\n    jt.log(step=step, total=t.item())\n    time.sleep(0.1)\n"
    "print(f'rank {hvd.rank()} of {hvd.size()} sum {t.item()}')\n"
)


@MPI
def test_horovod_two_nodes_by_two_completes_with_every_rank(home, kube_cluster):
    pytest.importorskip("horovod.torch")
    kube_target(home, kube_cluster)
    run = api.submit(HVD, target="kube", nodes=2, procs=2, launcher="horovod", name="kube-hvd")
    run.wait(timeout=150)
    state = run.state
    assert state["status"] == "completed", state.get("error")
    for rank in range(4):
        assert f"rank {rank} of 4 sum 10.0" in run.logs(rank)
        assert [s for s, _ in run.metrics(rank)["total"]] == list(range(10))
    assert_nothing_left(state, kube_cluster)


@pytest.mark.parametrize("kube_cluster", [{"trainjob_api": True}], indirect=True)
def test_the_mpi_runtime_refuses_the_open_mpi_variables_it_sets_itself(kube_cluster):
    from lightkube.core.exceptions import ApiError
    from lightkube.models.meta_v1 import ObjectMeta
    from support.kube_fake.testing import PY, TrainJob, client

    with pytest.raises(ApiError) as err:
        client(kube_cluster).create(
            TrainJob(
                metadata=ObjectMeta(name="bad"),
                spec={
                    "runtimeRef": {"name": "mpi-distributed"},
                    "trainer": {
                        "command": [PY, "-c", "pass"],
                        "env": [{"name": "OMPI_MCA_orte_default_hostfile", "value": "/tmp/h"}],
                    },
                },
            )
        )
    assert err.value.status.code == 422
    assert "must not have reserved envs" in err.value.status.message
    assert "OMPI_MCA_orte_default_hostfile" in err.value.status.message
