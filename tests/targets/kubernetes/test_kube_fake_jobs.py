"""The fake Kubernetes cluster's Jobs and pods, run as real local processes: indexed Jobs with
their env, ConfigMaps and logs, torchrun over a headless Service, failure policies, foreground
deletion, the scheduler's pending reasons, and init containers with shared volumes."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from conftest import wait_for
from lightkube import ApiError
from lightkube.models.batch_v1 import (
    PodFailurePolicy,
    PodFailurePolicyOnExitCodesRequirement,
    PodFailurePolicyRule,
)
from lightkube.models.core_v1 import (
    ConfigMapVolumeSource,
    ServicePort,
    ServiceSpec,
    Volume,
    VolumeMount,
)
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import ConfigMap, Event, Pod, Service
from lightkube.types import CascadeType
from support.kube_fake import FakeCluster
from support.kube_fake.cluster import free_port
from support.kube_fake.fixtures import kube_cluster  # noqa: F401 (fixture)
from support.kube_fake.testing import (
    ALLREDUCE,
    FAIL_INDEX_1,
    PY,
    SLEEP_WITH_A_CHILD_IN_ITS_OWN_SESSION,
    TORCHRUN,
    alive,
    client,
    condition,
    deleted,
    indexed_job,
    one_container_pod,
)


def test_indexed_job_runs_pods_with_env_and_configmap_and_streams_logs(kube_cluster):
    kc = client(kube_cluster)
    kc.create(
        ConfigMap(
            metadata=ObjectMeta(name="code"),
            data={"greeting.txt": "hello from a configmap"},
            binaryData={"blob.bin": "AAEC"},
        )
    )
    script = (
        "import os, time\n"
        "time.sleep(0.5)\n"
        "print('index', os.environ['JOB_COMPLETION_INDEX'], 'host', os.environ['HOSTNAME'],"
        " 'cwd', os.getcwd(), flush=True)\n"
        "time.sleep(0.5)\n"
        "print(open('/etc/jt/greeting.txt').read(), list(open('/etc/jt/blob.bin', 'rb').read()))\n"
    )
    job = indexed_job(
        "hello",
        [PY, "-c", script],
        volumes=[Volume(name="code", configMap=ConfigMapVolumeSource(name="code"))],
        mounts=[VolumeMount(name="code", mountPath="/etc/jt", readOnly=True)],
    )
    job.spec.template.spec.containers[0].workingDir = "/workspace/run"
    kc.create(job)
    pods = wait_for(
        lambda: (
            [p for p in kc.list(Pod, labels={"job-name": "hello"}) if p.status.phase == "Running"]
            if len(list(kc.list(Pod, labels={"job-name": "hello"}))) == 2
            else None
        ),
        what="2 pods running",
    )
    by_index = {}
    for pod in kc.list(Pod, labels={"job-name": "hello"}):
        index = pod.metadata.labels["batch.kubernetes.io/job-completion-index"]
        assert (
            pod.metadata.name.startswith(f"hello-{index}-")
            and len(pod.metadata.name) == len("hello-0-") + 5
        )
        assert pod.spec.hostname == f"hello-{index}"
        assert pod.metadata.ownerReferences[0].kind == "Job"
        by_index[index] = pod.metadata.name
    assert sorted(by_index) == ["0", "1"] and pods
    lines = {i: list(kc.log(name, follow=True)) for i, name in by_index.items()}
    for index, got in lines.items():
        assert got[0] == f"index {index} host hello-{index} cwd /workspace/run\n"
        assert got[1] == "hello from a configmap [0, 1, 2]\n"
    done = wait_for(lambda: condition(kc.get(Job, "hello"), "Complete"), what="Job Complete")
    assert done["reason"] == "CompletionsReached"
    job = kc.get(Job, "hello")
    assert job.status.succeeded == 2 and job.status.completedIndexes == "0-1"
    assert all(p.status.phase == "Succeeded" for p in kc.list(Pod, labels={"job-name": "hello"}))
    assert not Path("/workspace/run").exists() and not Path("/etc/jt").exists()
    events = sorted(
        kc.list(Event, fields={"involvedObject.name": by_index["0"]}),
        key=lambda e: int(e.metadata.resourceVersion),
    )
    assert [e.reason for e in events] == ["Scheduled", "Pulled", "Created", "Started"]
    assert events[0].message == f"Successfully assigned default/{by_index['0']} to fake-node"


@pytest.mark.slow
def test_torchrun_gloo_over_an_indexed_job_and_headless_service(kube_cluster, tmp_path):
    kc = client(kube_cluster)
    port = free_port()
    kc.create(ConfigMap(metadata=ObjectMeta(name="train"), data={"allreduce.py": ALLREDUCE}))
    kc.create(
        Service(
            metadata=ObjectMeta(name="ddp"),
            spec=ServiceSpec(
                clusterIP="None", selector={"job-name": "ddp"}, ports=[ServicePort(port=port)]
            ),
        )
    )
    argv = [
        TORCHRUN,
        "--nnodes",
        "2",
        "--nproc-per-node",
        "2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"ddp-0.ddp:{port}",
        "--rdzv-id",
        "ddp",
        "/code/allreduce.py",
    ]
    kc.create(
        indexed_job(
            "ddp",
            argv,
            subdomain="ddp",
            volumes=[Volume(name="code", configMap=ConfigMapVolumeSource(name="train"))],
            mounts=[VolumeMount(name="code", mountPath="/code")],
        )
    )
    wait_for(
        lambda: (
            condition(kc.get(Job, "ddp"), "Complete") or condition(kc.get(Job, "ddp"), "Failed")
        ),
        timeout=180,
        what="the ddp Job to finish",
    )
    logs = "".join(
        "".join(kc.log(p.metadata.name)) for p in kc.list(Pod, labels={"job-name": "ddp"})
    )
    assert condition(kc.get(Job, "ddp"), "Complete"), logs
    sums = sorted(line for line in logs.splitlines() if line.startswith("rank "))
    assert [s.split()[1] for s in sums] == ["0/4", "1/4", "2/4", "3/4"], logs
    assert all(s.endswith("sum 10") for s in sums)
    assert {s.split()[5] for s in sums} == {"ddp-0", "ddp-1"}


def test_failing_pod_fails_the_job_and_stops_the_others(kube_cluster):
    kc = client(kube_cluster)
    kc.create(indexed_job("bad", [PY, "-c", FAIL_INDEX_1]))
    failed = wait_for(lambda: condition(kc.get(Job, "bad"), "Failed"), what="Job Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert failed["message"] == "Job has reached the specified backoff limit"
    wait_for(lambda: not kube_cluster.processes(), what="the other pod's process to stop")
    pods = {
        p.metadata.labels["batch.kubernetes.io/job-completion-index"]: p
        for p in kc.list(Pod, labels={"job-name": "bad"})
    }
    term = pods["1"].status.containerStatuses[0].state.terminated
    assert (pods["1"].status.phase, term.exitCode, term.reason) == ("Failed", 3, "Error")
    assert term.message == "index 1 gives up\n"  # written to /dev/termination-log


def test_pod_failure_policy_fail_job_names_the_pod(kube_cluster):
    kc = client(kube_cluster)
    job = indexed_job(
        "pfp",
        [PY, "-c", "import sys; print('x' * 3000); print('why'); sys.exit(42)"],
        completions=1,
        backoff=6,
        podFailurePolicy=PodFailurePolicy(
            rules=[
                PodFailurePolicyRule(
                    action="FailJob",
                    onExitCodes=PodFailurePolicyOnExitCodesRequirement(operator="In", values=[42]),
                )
            ]
        ),
    )
    job.spec.template.spec.containers[0].terminationMessagePolicy = "FallbackToLogsOnError"
    kc.create(job)
    failed = wait_for(lambda: condition(kc.get(Job, "pfp"), "Failed"), what="Job Failed")
    pod = next(iter(kc.list(Pod, labels={"job-name": "pfp"})))
    message = pod.status.containerStatuses[0].state.terminated.message
    assert len(message) == 2048 and message.endswith("xx\nwhy\n")
    assert failed["reason"] == "PodFailurePolicy"
    assert failed["message"] == (
        f"Container main for pod default/{pod.metadata.name} failed with "
        "exit code 42 matching FailJob rule at index 0"
    )
    assert kc.get(Job, "pfp").status.failed == 1


def test_foreground_delete_kills_every_process_before_the_job_goes(kube_cluster):
    kc = client(kube_cluster)
    kc.create(indexed_job("fg", [PY, "-c", SLEEP_WITH_A_CHILD_IN_ITS_OWN_SESSION]))
    seen: list = []

    def four():
        seen[:] = kube_cluster.processes()
        return list(seen) if len(seen) == 4 else None

    # four Python processes starting in pods: slow on a loaded machine
    try:
        procs = wait_for(four, timeout=90, what="2 pods x 2 processes")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the pods' processes: {seen}") from None
    assert {p["pod"].rsplit("-", 1)[0] for p in procs} == {"fg-0", "fg-1"}
    order = []
    stream = kc.watch(
        Pod, labels={"job-name": "fg"}, resource_version=kc.get(Job, "fg").metadata.resourceVersion
    )

    def record():
        for kind, obj in stream:
            order.append((kind, obj.metadata.name))
            if [k for k, _ in order].count("DELETED") == 2:
                return

    watcher = threading.Thread(target=record, daemon=True)
    watcher.start()
    kc.delete(Job, "fg", cascade=CascadeType.FOREGROUND)
    job = kc.get(Job, "fg")  # still there, waiting for its pods
    assert job.metadata.deletionTimestamp and "foregroundDeletion" in job.metadata.finalizers

    wait_for(lambda: deleted(kc, Job, "fg"), what="the Job to be deleted")
    assert not [p["pid"] for p in procs if alive(p["pid"])]
    assert not list(kc.list(Pod, labels={"job-name": "fg"}))
    watcher.join(10)
    assert sorted(name.rsplit("-", 1)[0] for k, name in order if k == "DELETED") == ["fg-0", "fg-1"]


def test_gpu_pod_stays_pending_with_the_schedulers_reason(kube_cluster):
    kc = client(kube_cluster)
    kc.create(one_container_pod("gpu", "print(1)", {"nvidia.com/gpu": "1"}))
    event = wait_for(
        lambda: next(iter(kc.list(Event, fields={"involvedObject.name": "gpu"})), None),
        what="a FailedScheduling event",
    )
    assert (event.reason, event.type, event.source.component) == (
        "FailedScheduling",
        "Warning",
        "default-scheduler",
    )
    assert event.message.startswith("0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
    time.sleep(0.5)
    pod = kc.get(Pod, "gpu")
    assert pod.status.phase == "Pending" and not pod.spec.nodeName
    assert (pod.status.conditions[0].type, pod.status.conditions[0].reason) == (
        "PodScheduled",
        "Unschedulable",
    )
    assert not kube_cluster.processes()
    with pytest.raises(ApiError) as err:
        list(kc.log("gpu"))
    assert (
        err.value.status.code == 400
        and "is waiting to start: ContainerCreating" in err.value.status.message
    )


def test_requests_within_allocatable_are_scheduled_one_after_another(tmp_path):
    go = tmp_path / "go"  # each pod runs until the test lets it end
    hold = f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.05)"
    with FakeCluster(tmp_path, allocatable={"nvidia.com/gpu": "1"}) as cluster:
        kc = client(cluster)
        for name in ("g1", "g2"):
            kc.create(one_container_pod(name, hold, {"nvidia.com/gpu": "1"}))
        wait_for(lambda: kc.get(Pod, "g1").status.phase == "Running", what="g1 running")
        assert kc.get(Pod, "g2").status.phase == "Pending"
        go.touch()
        wait_for(lambda: kc.get(Pod, "g2").status.phase == "Succeeded", what="g2 after g1")
        assert kc.get(Pod, "g1").status.phase == "Succeeded"


def test_init_containers_run_first_and_share_emptydir_and_pvc_volumes(kube_cluster):
    kc = client(kube_cluster)
    write = [PY, "-c", "import os; open('/scratch/order', 'a').write(os.environ['STEP'] + ' ')"]
    main = [
        PY,
        "-c",
        "import os; print(open('/scratch/order').read(), os.environ['POD'], os.environ['WHO'], os.environ['NODE'],"
        " file=open('/data/out.txt', 'w'))",
    ]
    mounts = [
        VolumeMount(name="scratch", mountPath="/scratch"),
        VolumeMount(name="data", mountPath="/data"),
    ]
    env = [
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "WHO", "value": "$(POD) on $(NODE) $$(POD)"},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
    kc.create(
        Pod.from_dict(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "init"},
                "spec": {
                    "restartPolicy": "Never",
                    "volumes": [
                        {"name": "scratch", "emptyDir": {}},
                        {"name": "data", "persistentVolumeClaim": {"claimName": "results"}},
                    ],
                    "initContainers": [
                        {
                            "name": f"step{i}",
                            "image": "x",
                            "command": write,
                            "env": [{"name": "STEP", "value": str(i)}],
                            "volumeMounts": [m.to_dict() for m in mounts],
                        }
                        for i in (1, 2)
                    ],
                    "containers": [
                        {
                            "name": "main",
                            "image": "x",
                            "command": main,
                            "env": env,
                            "volumeMounts": [m.to_dict() for m in mounts],
                        }
                    ],
                },
            }
        )
    )
    wait_for(lambda: kc.get(Pod, "init").status.phase == "Succeeded", what="the pod to succeed")
    pod = kc.get(Pod, "init")
    assert [s.state.terminated.exitCode for s in pod.status.initContainerStatuses] == [0, 0]
    out = next((kube_cluster.root / "pvcs" / "default" / "results").glob("out.txt")).read_text()
    assert out == "1 2  init init on $(NODE) $(POD) fake-node\n"  # NODE is defined after WHO
