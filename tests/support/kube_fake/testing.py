"""What the tests of the fake cluster share: a lightkube client for it, the Kubeflow Trainer
resources, a Job of indexed pods, reading conditions and pids, the cluster as a run target and
the objects a run leaves in it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from conftest import REPO
from lightkube import ApiError, Client, KubeConfig
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.models.batch_v1 import JobSpec
from lightkube.models.core_v1 import Container, PodSpec, PodTemplateSpec, ResourceRequirements
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod

from jupyter_trainer.targets.registry import add_target

PY = sys.executable
TORCHRUN = str(Path(PY).with_name("torchrun"))
TrainJob = create_namespaced_resource("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs")
ClusterTrainingRuntime = create_global_resource(
    "trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime", "clustertrainingruntimes"
)
TRAINER = {"trainjob_api": True}

ALLREDUCE = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(t)
line = (f"rank {dist.get_rank()}/{dist.get_world_size()} node {os.environ.get('GROUP_RANK')} "
        f"host {os.environ['HOSTNAME']} sum {t.item():g}\\n")
os.write(1, line.encode())
dist.destroy_process_group()
"""
FAIL_INDEX_1 = """
import os, sys, time
if os.environ["JOB_COMPLETION_INDEX"] == "1":
    open("/dev/termination-log", "w").write("index 1 gives up\\n")
    sys.exit(3)
time.sleep(300)
"""
SLEEP_WITH_A_CHILD_IN_ITS_OWN_SESSION = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
time.sleep(300)
"""


def client(cluster) -> Client:
    return Client(KubeConfig.from_file(cluster.kubeconfig))


def condition(obj, type_):
    status = obj.status if hasattr(obj, "status") else obj["status"]
    conds = status.conditions if hasattr(status, "conditions") else (status or {}).get("conditions")
    for c in conds or []:
        c = c if isinstance(c, dict) else c.to_dict()
        if c["type"] == type_ and c["status"] == "True":
            return c
    return None


def indexed_job(
    name, argv, completions=2, subdomain=None, volumes=(), mounts=(), backoff=0, **spec
) -> Job:
    pod = PodSpec(
        restartPolicy="Never",
        subdomain=subdomain,
        volumes=list(volumes) or None,
        containers=[
            Container(
                name="main", image="python:3.11", command=argv, volumeMounts=list(mounts) or None
            )
        ],
    )
    return Job(
        metadata=ObjectMeta(name=name, labels={"app": name}),
        spec=JobSpec(
            completionMode="Indexed",
            completions=completions,
            parallelism=completions,
            backoffLimit=backoff,
            template=PodTemplateSpec(spec=pod),
            **spec,
        ),
    )


def one_container_pod(name: str, code: str, limits: dict[str, str] | None = None) -> Pod:
    """A pod that runs ``python -c code`` once, with these resource limits."""
    resources = ResourceRequirements(limits=limits) if limits else None
    main = Container(name="main", image="x", command=[PY, "-c", code], resources=resources)
    return Pod(
        metadata=ObjectMeta(name=name), spec=PodSpec(restartPolicy="Never", containers=[main])
    )


def deleted(kc: Client, kind, name: str) -> bool:
    """Whether the API server no longer has ``name`` of ``kind`` (it answers 404)."""
    try:
        kc.get(kind, name)
    except ApiError as exc:
        return exc.status.code == 404
    return False


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def kube_target(home, cluster, api_name: str, **settings) -> None:
    """The fake cluster as the target 'kube', its runs made through ``api_name``."""
    add_target(
        "kube",
        "kubernetes",
        home=home,
        replace=True,
        kubeconfig=str(cluster.kubeconfig),
        image="example.org/trainer:1.0",
        python=sys.executable,
        api=api_name,
        env={"PYTHONPATH": str(REPO), "GLOO_SOCKET_IFNAME": "lo"},
        **settings,
    )


def run_objects(cluster) -> list[str]:
    """Every Job, TrainJob, Service, ConfigMap and Pod of a run left in the fake's store."""
    kinds = [
        ("batch", "v1", "jobs"),
        ("", "v1", "services"),
        ("", "v1", "configmaps"),
        ("", "v1", "pods"),
        ("trainer.kubeflow.org", "v1alpha1", "trainjobs"),
    ]
    found = []
    for group, version, plural in kinds:
        res = cluster.registry.find(group, version, plural)
        if res is None:
            continue
        for obj in cluster.store.list(res, cluster.namespace)[0]:
            if (
                "jupyter-trainer/run-id" in (obj["metadata"].get("labels") or {})
                or plural == "pods"
            ):
                found.append(f"{obj['kind']}/{obj['metadata']['name']}")
    return found
