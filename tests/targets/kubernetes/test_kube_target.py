"""The kubernetes target's whole lifecycle against the fake API server (tests/support/kube_fake):
``%%train`` cells and the CLI send real runs whose pods are real local processes (torchrun,
Gloo), through the plain Indexed Job API and through a Kubeflow TrainJob."""

from __future__ import annotations

import fcntl
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from conftest import REPO, wait_for
from support.jt_cli import CLI
from support.kube_fake.fixtures import kube_cluster  # noqa: F401 (a fixture)
from support.kube_fake.testing import kube_target, run_objects
from support.workloads import FAIL_RANK_3, GLOO_SLEEPER, RESUMABLE

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import RunFailed, TargetError
from jupyter_trainer.targets.kubernetes.manifests import RDZV_PORT
from jupyter_trainer.targets.registry import add_target

JOB = {"trainjob_api": False}
TRAINER = {"trainjob_api": True}
BOTH = pytest.mark.parametrize(
    "kube_cluster, api_name",
    [(JOB, "job"), (TRAINER, "trainjob")],
    indirect=True,
    ids=["job", "trainjob"],
)

ALLREDUCE = """%%train --target kube --nodes 2 --procs 2 --name kube-ddp
import time
import torch, torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group("gloo")
t = torch.tensor([float(jt.rank + 1)])
dist.all_reduce(t)
for step in range(steps):
    jt.log(step=step, total=t.item(), rank=jt.rank)
    time.sleep(pause)
print(f"rank {jt.rank} of {jt.world_size} sum {t.item()}")
"""


@pytest.fixture
def api_name(request):
    """The API a test's target uses. The pods of a plain Job share this host's network, so
    its fixed rendezvous port (29400, as in a real pod of its own) is held by one such run at a
    time on this machine; a TrainJob's port is a free one the fake gives it."""
    name = request.param
    if name != "job":
        yield name
        return
    with open(Path(tempfile.gettempdir()) / f"jt-kube-rdzv-{RDZV_PORT}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield name


def only_run(home) -> api.Run:
    runs = api.runs(home=home)
    assert len(runs) == 1, runs
    return runs[0]


@BOTH
def test_two_by_two_gloo_cell_completes_with_live_events(ip, home, kube_cluster, api_name):
    kube_target(home, kube_cluster, api_name)
    ip.user_ns.update(steps=40, pause=0.1)
    result = {}
    cell = threading.Thread(
        target=lambda: result.update(r=ip.run_cell(ALLREDUCE, store_history=True))
    )
    cell.start()
    run = wait_for(lambda: api.runs(home=home) and only_run(home), what="the run to be created")
    live = wait_for(
        lambda: (
            run.status == "running"
            and all(run.store.read_events(run.id, r)[0] for r in range(4))
            and run.state
        ),
        timeout=180,
        what="events of all 4 ranks while running",
    )
    assert live["status"] == "running"
    cell.join(240)
    assert not cell.is_alive()
    assert result["r"].success, result["r"].error_in_exec
    state = run.state
    assert state["status"] == "completed", state.get("error")
    for rank in range(4):
        assert f"rank {rank} of 4 sum 10.0" in run.logs(rank)
        assert [s for s, _ in run.metrics(rank)["total"]] == list(range(40))
    assert state["teardown"]["leftovers"] == []
    assert kube_cluster.processes() == []


@BOTH
def test_cancel_mid_run_leaves_no_pod_process_and_no_object(home, kube_cluster, api_name):
    kube_target(home, kube_cluster, api_name)
    run = api.submit(GLOO_SLEEPER, target="kube", nodes=2, procs=2, name="kube-cancel")
    wait_for(
        lambda: all(run.store.read_events(run.id, r)[0] for r in range(4)),
        timeout=120,
        what="all four ranks to log",
    )
    assert run.status == "running" and len(kube_cluster.processes()) >= 2
    run.cancel(timeout=90)
    state = run.state
    assert state["status"] == "canceled"
    assert kube_cluster.processes() == []
    assert run_objects(kube_cluster) == []
    teardown = state["teardown"]
    assert teardown["leftovers"] == []
    kinds = {"job": ["Job", "Service", "ConfigMap"], "trainjob": ["TrainJob", "ConfigMap"]}[
        api_name
    ]
    assert [o.split("/")[0] for o in teardown["deleted"]] == kinds, teardown
    assert teardown["propagation"] == "Foreground" and teardown["left"] == []


@BOTH
def test_a_failing_rank_fails_the_run_naming_the_rank_and_its_error(home, kube_cluster, api_name):
    kube_target(home, kube_cluster, api_name)
    started = time.monotonic()
    run = api.submit(FAIL_RANK_3, target="kube", nodes=2, procs=2, name="kube-fail")
    with pytest.raises(RunFailed) as info:
        run.wait(timeout=180)
    took = time.monotonic() - started
    state = run.state
    assert state["status"] == "failed" and state.get("failed_rank") == 3, json.dumps(
        state, indent=1
    )
    assert info.value.failed_rank == 3
    assert state["error"] == "KeyError: 'missing column on node 1'"
    assert "raise KeyError('missing column on node 1')" in (state.get("traceback") or "")
    assert state["teardown"]["leftovers"] == []
    assert kube_cluster.processes() == [] and run_objects(kube_cluster) == []
    # Found from the container's end, not after the Job's retries (TrainJob pods restart in place).
    assert took < 60, took


@BOTH
def test_an_unschedulable_pod_shows_queued_with_the_schedulers_reason(home, kube_cluster, api_name):
    kube_target(home, kube_cluster, api_name, gpus_per_node=1)
    run = api.submit(GLOO_SLEEPER, target="kube", nodes=2, procs=2, name="kube-gpu", backend="gloo")
    state = wait_for(
        lambda: (
            lambda s: (
                s["status"] == "queued"
                and "nvidia.com/gpu" in str((s.get("queue") or {}).get("reason"))
                and s
            )
        )(run.state),
        timeout=60,
        what="queued with the scheduler's reason",
    )
    assert "0/1 nodes are available: 1 Insufficient nvidia.com/gpu" in state["queue"]["reason"]
    assert state["queue"]["stage"] == "queued"
    run.cancel(timeout=90)
    state = run.state
    assert state["status"] == "canceled"
    assert state["teardown"]["leftovers"] == []
    assert kube_cluster.processes() == [] and run_objects(kube_cluster) == []


@pytest.mark.parametrize(
    "kube_cluster, api_name", [(TRAINER, "trainjob")], indirect=True, ids=["trainjob"]
)
def test_a_node_container_that_dies_restarting_in_place_fails_the_run(home, kube_cluster, api_name):
    """A rank that ends without a traceback or a record of its end (``_exit`` from native
    code, past the rank's own ``os._exit``) takes its node's torchrun down; the TrainJob's pod
    restarts in place (OnFailure), so only its container status says so."""
    kube_target(home, kube_cluster, api_name)
    code = (
        "import posix, time\nimport torch.distributed as dist\nfrom jupyter_trainer import runtime as jt\n"
        "dist.init_process_group('gloo')\njt.log(step=0, up=1)\n"
        "if jt.rank == 2:\n    posix._exit(7)\ntime.sleep(600)\n"
    )
    started = time.monotonic()
    run = api.submit(code, target="kube", nodes=2, procs=2, name="kube-exit")
    with pytest.raises(RunFailed):
        run.wait(timeout=180)
    state = run.state
    assert state["status"] == "failed" and state.get("failed_rank") == 2, json.dumps(
        state, indent=1
    )
    assert "rank 2 ended without recording an exit (exited with code 7" in state["error"]
    # Whichever comes first ends the run: the container's end in the pod's status, or
    # torchrun's own report of the failed rank in the node's log (then the container is
    # still stopping, and the scheduler saw only this run's teardown delete the TrainJob).
    scheduler = state["scheduler"]
    if scheduler["state"] == "failed":
        assert scheduler.get("reason") == "ContainerFailed", scheduler
        assert "-node-0-1-" in scheduler["failed_pod"]["pod"], scheduler
        assert scheduler["failed_pod"]["exit_code"], scheduler
    else:
        assert scheduler["state"] == "deleted", scheduler
    # Found from the container's end, not after the Job's backoffLimit of restarts.
    assert time.monotonic() - started < 60
    assert state["teardown"]["leftovers"] == []
    assert kube_cluster.processes() == [] and run_objects(kube_cluster) == []


@BOTH
def test_dry_run_prints_the_objects_a_run_then_creates(home, kube_cluster, api_name, tmp_path):
    """``jupyter-trainer submit --dry-run`` prints the run's manifests alone on stdout (what
    ``kubectl apply -f -`` takes), creates nothing on the cluster and no run; a real run of the
    same script then creates objects of the same kinds."""
    import os
    import subprocess

    import yaml

    kube_target(home, kube_cluster, api_name)
    script = tmp_path / "train.py"
    script.write_text(GLOO_SLEEPER)
    done = subprocess.run(
        [
            *CLI,
            "submit",
            str(script),
            "--target",
            "kube",
            "--nodes",
            "2",
            "--procs",
            "2",
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr
    printed = [doc for doc in yaml.safe_load_all(done.stdout) if doc is not None]
    kinds = sorted(doc["kind"] for doc in printed)
    expected = ["ConfigMap", "Job", "Service"] if api_name == "job" else ["ConfigMap", "TrainJob"]
    assert kinds == expected, kinds
    assert all(doc["metadata"]["labels"]["jupyter-trainer/run-id"] for doc in printed)
    assert api.runs(home=home) == [] and run_objects(kube_cluster) == []
    assert kube_cluster.processes() == []

    run = api.submit(script=script, target="kube", nodes=2, procs=2)
    created = wait_for(
        lambda: (lambda kinds: kinds if kinds >= set(expected) else None)(
            {entry.split("/")[0] for entry in run_objects(kube_cluster)} - {"Pod"}
        ),
        timeout=120,
        what=f"the run to create {expected}",
    )
    assert created >= set(expected), created
    run.cancel(timeout=90)
    assert kube_cluster.processes() == []


def without_snapshot(docs: list[dict]) -> list[dict]:
    """The manifests less the snapshot's bytes (a gzip stream that may differ run to run)."""
    for doc in docs:
        doc.get("binaryData", {}).pop("snapshot.tar.gz", None)
    return docs


def unreachable_kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig whose server is a loopback port nothing listens on."""
    from support.kube_fake.cluster import free_port

    path = tmp_path / "gone-kubeconfig"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: gone, cluster: {{server: "http://127.0.0.1:{free_port()}"}}}}]
users: [{{name: me, user: {{token: "t"}}}}]
contexts: [{{name: gone, context: {{cluster: gone, user: me, namespace: default}}}}]
current-context: gone
""")
    return path


@pytest.mark.parametrize(
    "where, says",
    [
        ("nothing listening", "is the cluster at the kubeconfig's server reachable?"),
        ("no kubeconfig", "cannot use kubeconfig"),
    ],
)
def test_dry_run_with_api_auto_and_no_cluster_shows_both_apis(home, tmp_path, where, says):
    """``api = "auto"`` picks the API by what the cluster serves; a dry run that cannot ask it
    prints the run both ways, each set preceded by a comment saying when it applies, with
    the same manifests as ``api = "trainjob"`` and ``api = "job"`` print."""
    import os
    import subprocess

    import yaml

    kubeconfig = (
        unreachable_kubeconfig(tmp_path) if where == "nothing listening" else tmp_path / "missing"
    )
    script = tmp_path / "train.py"
    script.write_text(GLOO_SLEEPER)
    shown = {}
    for api_name in ("auto", "trainjob", "job"):
        add_target(
            "kube",
            "kubernetes",
            home=home,
            replace=True,
            kubeconfig=str(kubeconfig),
            image="example.org/trainer:1.0",
            python=sys.executable,
            api=api_name,
        )
        done = subprocess.run(
            [
                *CLI,
                "submit",
                str(script),
                "--target",
                "kube",
                "--nodes",
                "2",
                "--procs",
                "2",
                "--dry-run",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert done.returncode == 0, done.stderr
        shown[api_name] = done
    both = shown["auto"]
    notes = both.stderr
    assert 'api = "auto" and the cluster could not be asked which API it serves' in notes
    assert says in notes and "so the run is shown both ways" in notes
    trainjob_part, job_part = both.stdout.split("---\n# where it does not: ")
    assert trainjob_part.startswith(
        "# where the cluster serves Kubeflow Trainer v2 (TrainJob): a Kubeflow Trainer TrainJob\n"
    )
    assert job_part.startswith("an Indexed Job with a headless Service\n")
    assert without_snapshot(list(yaml.safe_load_all(trainjob_part))) == without_snapshot(
        list(yaml.safe_load_all(shown["trainjob"].stdout))
    )
    assert without_snapshot(
        list(yaml.safe_load_all(job_part.split("\n", 1)[1]))
    ) == without_snapshot(list(yaml.safe_load_all(shown["job"].stdout)))
    assert "could not be asked" not in shown["job"].stderr + shown["trainjob"].stderr
    assert api.runs(home=home) == []


def test_dry_run_with_api_auto_and_no_cluster_leaves_out_an_api_that_cannot_run_it(home, tmp_path):
    add_target(
        "kube",
        "kubernetes",
        home=home,
        replace=True,
        kubeconfig=str(unreachable_kubeconfig(tmp_path)),
        image="example.org/trainer:1.0",
        python=sys.executable,
        api="auto",
    )
    shown = api.submit(
        "print('hi')", target="kube", nodes=2, procs=2, launcher="mpirun", dry_run=True
    )
    assert [line.split(":")[0] for line in shown.text.splitlines() if line.startswith("kind:")] == [
        "kind"
    ] * 2
    assert "kind: TrainJob" in shown.text and "kind: Job" not in shown.text
    assert any("so the run is a Kubeflow Trainer TrainJob" in note for note in shown.notes)
    assert any(
        note.startswith(
            "not an Indexed Job with a headless Service: --launcher mpirun "
            "on 2 nodes needs Kubeflow Trainer's MPI runtime"
        )
        for note in shown.notes
    ), shown.notes


@BOTH
def test_dry_run_with_api_auto_says_which_api_the_cluster_serves(home, kube_cluster, api_name):
    kube_target(home, kube_cluster, "auto")
    shown = api.submit("print('hi')", target="kube", nodes=2, procs=2, dry_run=True)
    kinds = sorted(
        line.split(": ", 1)[1] for line in shown.text.splitlines() if line.startswith("kind: ")
    )
    if api_name == "trainjob":
        assert kinds == ["ConfigMap", "TrainJob"]
        said = (
            'api = "auto": the cluster serves Kubeflow Trainer\'s TrainJob API, so the run '
            "is a Kubeflow Trainer TrainJob"
        )
    else:
        assert kinds == ["ConfigMap", "Job", "Service"]
        said = (
            'api = "auto": the cluster does not serve Kubeflow Trainer\'s TrainJob API, so '
            "the run is an Indexed Job with a headless Service"
        )
    assert said in shown.notes and f"# {said}\n" in shown.header
    assert run_objects(kube_cluster) == [] and api.runs(home=home) == []


@pytest.mark.parametrize("kube_cluster, api_name", [(JOB, "job")], indirect=True, ids=["job"])
def test_a_run_resumes_on_kubernetes_from_the_checkpoint_it_kept_on_the_claim(
    home, kube_cluster, api_name
):
    """The checkpoint comes back from workdir_pvc with the run, and resume puts it onto the
    claim in the new run's folder, where its ranks load it."""
    claim = kube_cluster.root / "pvcs" / kube_cluster.namespace / "team-runs"
    claim.mkdir(parents=True, exist_ok=True)
    kube_target(home, kube_cluster, api_name, workdir_pvc="team-runs", workdir_local=str(claim))
    first = api.submit(RESUMABLE, target="kube", nodes=1, procs=2, name="kube-first")
    first.wait(timeout=180)
    kept = first.store.existing(first.id).checkpoints
    assert [p.name for p in kept.iterdir()] == ["step-2.pt"]
    again = api.resume(first.id).wait(timeout=180)
    assert again.metrics(1)["first"] == [(3, 3.0), (4, 3.0), (5, 3.0)]
    assert (claim / again.id / "checkpoints" / "step-2.pt").is_file()
    kube_target(home, kube_cluster, api_name)  # no shared volume: refused before anything runs
    with pytest.raises(TargetError, match="workdir_pvc"):
        api.resume(first.id)
    assert len(api.runs(home=home)) == 2
