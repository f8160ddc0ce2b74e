"""The fake Kubernetes cluster's TrainJobs (Kubeflow Trainer v2): torchrun with the torch
plugin's env, foreground deletion, restarts in place up to the backoff limit, and runtime
patches, applied or refused."""

from __future__ import annotations

import httpx
import pytest
from conftest import wait_for
from lightkube import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import ConfigMap, Event, Pod, Service
from lightkube.types import CascadeType
from support.kube_fake.fixtures import kube_cluster  # noqa: F401 (fixture)
from support.kube_fake.testing import (
    ALLREDUCE,
    PY,
    SLEEP_WITH_A_CHILD_IN_ITS_OWN_SESSION,
    TRAINER,
    TrainJob,
    alive,
    client,
    condition,
    deleted,
)


@pytest.mark.slow
@pytest.mark.parametrize("kube_cluster", [TRAINER], indirect=True)
def test_trainjob_runs_torchrun_with_the_torch_plugin_env(kube_cluster, tmp_path):
    kc = client(kube_cluster)
    script = tmp_path / "allreduce.py"
    script.write_text(
        ALLREDUCE + "os.write(1, ' '.join(['PET'] + [os.environ[k] for k in ('PET_NNODES',"
        " 'PET_NPROC_PER_NODE', 'PET_NODE_RANK', 'PET_MASTER_ADDR')]).encode() + b'\\n')\n"
    )
    kc.create(
        TrainJob(
            metadata=ObjectMeta(name="tj"),
            spec={
                "runtimeRef": {"name": "torch-distributed"},
                "trainer": {
                    "numNodes": 2,
                    "numProcPerNode": 2,
                    "image": "pytorch/pytorch:2.13.0",
                    "command": ["torchrun", str(script)],
                },
            },
        )
    )
    wait_for(
        lambda: (
            condition(kc.get(TrainJob, "tj"), "Complete")
            or condition(kc.get(TrainJob, "tj"), "Failed")
        ),
        timeout=180,
        what="the TrainJob to finish",
    )
    pods = list(kc.list(Pod, labels={"jobset.sigs.k8s.io/jobset-name": "tj"}))
    logs = "".join("".join(kc.log(p.metadata.name, container="node")) for p in pods)
    tj = kc.get(TrainJob, "tj")
    assert condition(tj, "Complete")["reason"] == "AllJobsCompleted", logs
    assert tj["status"]["jobsStatus"] == [
        {"name": "node", "active": 0, "ready": 0, "succeeded": 1, "failed": 0, "suspended": 0}
    ]
    assert sorted(p.spec.hostname for p in pods) == ["tj-node-0-0", "tj-node-0-1"]
    assert {p.spec.subdomain for p in pods} == {"tj"}
    assert kc.get(Service, "tj").spec.clusterIP == "None"
    sums = [line for line in logs.splitlines() if line.startswith("rank ")]
    assert len(sums) == 4 and all(s.endswith("sum 10") for s in sums), logs
    pet = sorted(line for line in logs.splitlines() if line.startswith("PET "))
    assert pet == ["PET 2 2 0 tj-node-0-0.tj"] * 2 + ["PET 2 2 1 tj-node-0-0.tj"] * 2, {
        p.metadata.name: "".join(kc.log(p.metadata.name, container="node")) for p in pods
    }


@pytest.mark.parametrize("kube_cluster", [TRAINER], indirect=True)
def test_trainjob_foreground_delete_removes_jobs_pods_and_processes(kube_cluster):
    kc = client(kube_cluster)
    kc.create(
        TrainJob(
            metadata=ObjectMeta(name="long"),
            spec={
                "runtimeRef": {"name": "torch-distributed"},
                "trainer": {
                    "numNodes": 2,
                    "command": [PY, "-c", SLEEP_WITH_A_CHILD_IN_ITS_OWN_SESSION],
                },
            },
        )
    )
    procs = wait_for(
        lambda: (lambda ps: ps if len(ps) == 4 else None)(kube_cluster.processes()),
        what="2 nodes x 2 processes",
    )
    assert {p["container"] for p in procs} == {"node"}
    assert kc.get(Job, "long-node-0").metadata.ownerReferences[0].kind == "TrainJob"
    kc.delete(TrainJob, "long", cascade=CascadeType.FOREGROUND)

    wait_for(lambda: deleted(kc, TrainJob, "long"), what="the TrainJob to be deleted")
    assert not [p["pid"] for p in procs if alive(p["pid"])]
    assert not list(kc.list(Job)) and not list(kc.list(Pod)) and not list(kc.list(Service))


@pytest.mark.parametrize("kube_cluster", [TRAINER], indirect=True)
def test_failing_trainjob_node_restarts_in_place_until_the_backoff_limit(kube_cluster):
    kc = client(kube_cluster)
    argv = [
        PY,
        "-c",
        "import os, sys, time\nif os.environ['PET_NODE_RANK'] == '1':\n"
        "    print('node 1 fails'); sys.exit(5)\ntime.sleep(300)",
    ]
    kc.create(
        TrainJob(
            metadata=ObjectMeta(name="crash"),
            spec={
                "runtimeRef": {"name": "torch-distributed"},
                "trainer": {"numNodes": 2, "command": argv},
            },
        )
    )
    pod = wait_for(
        lambda: next(
            (
                p
                for p in kc.list(Pod, labels={"batch.kubernetes.io/job-completion-index": "1"})
                if p.status.containerStatuses and p.status.containerStatuses[0].restartCount >= 1
            ),
            None,
        ),
        what="node 1 restarted in place",
    )
    assert pod.spec.restartPolicy == "OnFailure" and pod.status.phase == "Running"
    status = pod.status.containerStatuses[0]
    assert status.lastState.terminated.exitCode == 5
    previous = httpx.get(
        f"{kube_cluster.url}/api/v1/namespaces/default/pods/{pod.metadata.name}/log",
        params={"previous": "true"},
    )
    assert previous.text == "node 1 fails\n"
    failed = wait_for(
        lambda: condition(kc.get(TrainJob, "crash"), "Failed"),
        timeout=60,
        what="the TrainJob to fail",
    )
    assert (failed["reason"], failed["message"]) == (
        "FailedJobs",
        "jobset failed due to one or more job failures (first failed job: crash-node-0)",
    )
    job = kc.get(Job, "crash-node-0")
    assert job.spec.backoffLimit == 6  # the Job's default, as in a real cluster
    assert condition(job, "Failed")["reason"] == "BackoffLimitExceeded"
    backoffs = [
        e
        for e in kc.list(Event, fields={"involvedObject.name": pod.metadata.name})
        if e.reason == "BackOff"
    ]
    assert len(backoffs) == 6
    wait_for(
        lambda: not kube_cluster.processes() and not list(kc.list(Pod)),
        what="the pods to be deleted",
    )
    assert kc.get(TrainJob, "crash")["status"]["jobsStatus"][0]["failed"] == 1


@pytest.mark.parametrize("kube_cluster", [TRAINER], indirect=True)
def test_trainjob_runtime_patches_reach_the_pods(kube_cluster):
    kc = client(kube_cluster)
    kc.create(ConfigMap(metadata=ObjectMeta(name="code"), data={"greeting.txt": "patched in"}))
    script = (
        "import os\nprint(open('/etc/jt/greeting.txt').read(), os.environ['FROM_PATCH'], "
        "os.environ['FROM_TRAINER'], os.environ['PET_NODE_RANK'], flush=True)\n"
    )
    pod_patch = {
        "metadata": {"labels": {"run": "r1"}, "annotations": {"note": "a b"}},
        "spec": {
            "volumes": [{"name": "code", "configMap": {"name": "code"}}],
            "containers": [
                {
                    "name": "node",
                    "env": [{"name": "FROM_PATCH", "value": "p"}],
                    "volumeMounts": [{"name": "code", "mountPath": "/etc/jt"}],
                }
            ],
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        },
    }
    created = kc.create(
        TrainJob(
            metadata=ObjectMeta(name="patched"),
            spec={
                "runtimeRef": {"name": "torch-distributed"},
                "trainer": {
                    "numNodes": 2,
                    "command": [PY, "-c", script],
                    "env": [{"name": "FROM_TRAINER", "value": "t"}],
                },
                "runtimePatches": [
                    {
                        "manager": "test",
                        "trainingRuntimeSpec": {
                            "template": {
                                "spec": {
                                    "replicatedJobs": [
                                        {
                                            "name": "node",
                                            "template": {
                                                "metadata": {"labels": {"job": "j"}},
                                                "spec": {"template": pod_patch},
                                            },
                                        }
                                    ]
                                }
                            }
                        },
                    }
                ],
            },
        )
    )
    assert created["spec"]["runtimePatches"][0]["time"]  # stamped by the webhook
    wait_for(
        lambda: condition(kc.get(TrainJob, "patched"), "Complete"), timeout=60, what="Complete"
    )
    assert kc.get(Job, "patched-node-0").metadata.labels["job"] == "j"
    pods = sorted(kc.list(Pod, labels={"run": "r1"}), key=lambda p: p.metadata.name)
    assert len(pods) == 2
    for pod in pods:
        assert pod.metadata.annotations["note"] == "a b"
        assert pod.spec.nodeSelector == {"kubernetes.io/os": "linux"}
        assert pod.spec.tolerations[0].key == "nvidia.com/gpu"
        assert pod.spec.containers[0].image.startswith("pytorch/pytorch:")  # the runtime's
    logs = sorted("".join(kc.log(p.metadata.name)) for p in pods)
    assert logs == ["patched in p t 0\n", "patched in p t 1\n"]


@pytest.mark.parametrize("kube_cluster", [TRAINER], indirect=True)
@pytest.mark.parametrize(
    "rjob, container, field",
    [("launcher", "node", "replicatedJobs[0].name"), ("node", "sidecar", "containers[0].name")],
)
def test_runtime_patches_of_what_the_runtime_lacks_are_refused(
    kube_cluster, rjob, container, field
):
    with pytest.raises(ApiError) as err:
        client(kube_cluster).create(
            TrainJob(
                metadata=ObjectMeta(name="bad"),
                spec={
                    "runtimeRef": {"name": "torch-distributed"},
                    "trainer": {"command": [PY, "-c", "pass"]},
                    "runtimePatches": [
                        {
                            "manager": "test",
                            "trainingRuntimeSpec": {
                                "template": {
                                    "spec": {
                                        "replicatedJobs": [
                                            {
                                                "name": rjob,
                                                "template": {
                                                    "spec": {
                                                        "template": {
                                                            "spec": {
                                                                "containers": [
                                                                    {
                                                                        "name": container,
                                                                        "env": [
                                                                            {
                                                                                "name": "A",
                                                                                "value": "1",
                                                                            }
                                                                        ],
                                                                    }
                                                                ]
                                                            }
                                                        }
                                                    }
                                                },
                                            }
                                        ]
                                    }
                                }
                            },
                        }
                    ],
                },
            )
        )
    assert err.value.status.code == 422 and field in err.value.status.message
    assert list(client(kube_cluster).list(Job)) == []
