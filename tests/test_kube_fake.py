"""The fake Kubernetes API server (tests/kube_fake): lightkube against it over HTTP, with pods
run as real local processes."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from conftest import wait_for
from kube_fake import FakeCluster
from kube_fake.cluster import free_port
from kube_fake.fixtures import kube_cluster  # noqa: F401 (fixture)
from lightkube import ApiError, Client, KubeConfig
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.models.batch_v1 import (
    JobSpec,
    PodFailurePolicy,
    PodFailurePolicyOnExitCodesRequirement,
    PodFailurePolicyRule,
)
from lightkube.models.core_v1 import (
    ConfigMapVolumeSource,
    Container,
    PodSpec,
    PodTemplateSpec,
    ResourceRequirements,
    ServicePort,
    ServiceSpec,
    Volume,
    VolumeMount,
)
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import ConfigMap, Event, Pod, Service
from lightkube.types import CascadeType

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


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("trainjob_api", [True, False])
def test_discovery_says_whether_the_trainjob_api_is_served(tmp_path, trainjob_api):
    with FakeCluster(tmp_path, trainjob_api=trainjob_api) as cluster:
        groups = httpx.get(f"{cluster.url}/apis").json()
        names = {g["name"] for g in groups["groups"]}
        assert "batch" in names
        assert ("trainer.kubeflow.org" in names) is trainjob_api
        r = httpx.get(f"{cluster.url}/apis/trainer.kubeflow.org/v1alpha1")
        assert r.status_code == (200 if trainjob_api else 404)
        if trainjob_api:
            kinds = {x["name"]: x for x in r.json()["resources"]}
            assert (
                kinds["trainjobs"]["namespaced"]
                and not kinds["clustertrainingruntimes"]["namespaced"]
            )
            rt = client(cluster).get(ClusterTrainingRuntime, "torch-distributed")
            assert rt["spec"]["mlPolicy"]["torch"] == {}
        else:
            assert r.json()["reason"] == "NotFound"
        assert httpx.get(f"{cluster.url}/api").json()["versions"] == ["v1"]
        core = {x["name"] for x in httpx.get(f"{cluster.url}/api/v1").json()["resources"]}
        assert {"pods", "pods/log", "services", "configmaps", "events"} <= core


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


@pytest.mark.slow
@pytest.mark.parametrize("kube_cluster", [TRAINER], indirect=True)
def test_trainjob_runs_torchrun_with_the_torch_plugin_env(kube_cluster, tmp_path):
    kc = client(kube_cluster)
    script = tmp_path / "allreduce.py"
    script.write_text(
        ALLREDUCE + "print('PET', *[os.environ[k] for k in ('PET_NNODES', 'PET_NPROC_PER_NODE',"
        " 'PET_NODE_RANK', 'PET_MASTER_ADDR')])\n"
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
    assert pet == ["PET 2 2 0 tj-node-0-0.tj"] * 2 + ["PET 2 2 1 tj-node-0-0.tj"] * 2


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

    def gone():
        try:
            kc.get(Job, "fg")
        except ApiError as exc:
            return exc.status.code == 404

    wait_for(gone, what="the Job to be deleted")
    assert not [p["pid"] for p in procs if alive(p["pid"])]
    assert not list(kc.list(Pod, labels={"job-name": "fg"}))
    watcher.join(10)
    assert sorted(name.rsplit("-", 1)[0] for k, name in order if k == "DELETED") == ["fg-0", "fg-1"]


def test_gpu_pod_stays_pending_with_the_schedulers_reason(kube_cluster):
    kc = client(kube_cluster)
    kc.create(
        Pod(
            metadata=ObjectMeta(name="gpu"),
            spec=PodSpec(
                restartPolicy="Never",
                containers=[
                    Container(
                        name="main",
                        image="x",
                        command=[PY, "-c", "print(1)"],
                        resources=ResourceRequirements(limits={"nvidia.com/gpu": "1"}),
                    )
                ],
            ),
        )
    )
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
            kc.create(
                Pod(
                    metadata=ObjectMeta(name=name),
                    spec=PodSpec(
                        restartPolicy="Never",
                        containers=[
                            Container(
                                name="main",
                                image="x",
                                command=[PY, "-c", hold],
                                resources=ResourceRequirements(limits={"nvidia.com/gpu": "1"}),
                            )
                        ],
                    ),
                )
            )
        wait_for(lambda: kc.get(Pod, "g1").status.phase == "Running", what="g1 running")
        assert kc.get(Pod, "g2").status.phase == "Pending"
        go.touch()
        wait_for(lambda: kc.get(Pod, "g2").status.phase == "Succeeded", what="g2 after g1")
        assert kc.get(Pod, "g1").status.phase == "Succeeded"


def test_invalid_objects_get_the_api_servers_status_codes(tmp_path):
    with FakeCluster(tmp_path, trainjob_api=True) as cluster:
        kc = client(cluster)
        job = indexed_job("ok", [PY, "-c", "1"])
        job.spec.template.spec.restartPolicy = "Always"
        with pytest.raises(ApiError) as err:
            kc.create(job)
        assert (err.value.status.code, err.value.status.reason) == (422, "Invalid")
        assert (
            'spec.template.spec.restartPolicy: Unsupported value: "Always"'
            in err.value.status.message
        )
        with pytest.raises(ApiError) as err:
            kc.create(ConfigMap(metadata=ObjectMeta(name="Bad_Name"), data={"a": "b"}))
        assert err.value.status.code == 422 and "RFC 1123 subdomain" in err.value.status.message
        r = httpx.post(
            f"{cluster.url}/api/v1/namespaces/default/configmaps",
            json={
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "n"},
                "data": {"a": 1},
            },
        )
        assert r.status_code == 422 and r.json()["details"]["causes"][0]["field"] == "data.a"
        with pytest.raises(ApiError) as err:
            kc.create(
                TrainJob(
                    metadata=ObjectMeta(name="tj"),
                    spec={
                        "runtimeRef": {"name": "torch-distributed"},
                        "trainer": {"numNodes": "two"},
                    },
                )
            )
        assert err.value.status.code == 422 and "spec.trainer.numNodes" in err.value.status.message
        with pytest.raises(ApiError) as err:
            kc.create(
                TrainJob(metadata=ObjectMeta(name="tj"), spec={"runtimeRef": {"name": "nope"}})
            )
        assert err.value.status.code == 422
        kc.create(ConfigMap(metadata=ObjectMeta(name="dup")))
        with pytest.raises(ApiError) as err:
            kc.create(ConfigMap(metadata=ObjectMeta(name="dup")))
        assert (err.value.status.code, err.value.status.reason) == (409, "AlreadyExists")
        with pytest.raises(ApiError) as err:
            kc.get(Job, "missing")
        assert (err.value.status.code, err.value.status.message) == (
            404,
            'jobs.batch "missing" not found',
        )
        patched = kc.patch(
            ConfigMap,
            "dup",
            {"data": {"k": "v"}, "metadata": {"labels": {"a": "b"}}},
            patch_type=__import__("lightkube").types.PatchType.MERGE,
        )
        assert patched.data == {"k": "v"} and patched.metadata.labels == {"a": "b"}
        assert [c.metadata.name for c in kc.list(ConfigMap, labels={"a": "b"})] == ["dup"]


def test_watch_sees_added_modified_deleted(kube_cluster):
    rv = httpx.get(f"{kube_cluster.url}/api/v1/namespaces/default/pods").json()["metadata"][
        "resourceVersion"
    ]
    seen = []
    with httpx.stream(
        "GET",
        f"{kube_cluster.url}/api/v1/namespaces/default/pods",
        params={"watch": "true", "resourceVersion": rv},
        timeout=30,
    ) as stream:
        kc = client(kube_cluster)
        kc.create(
            Pod(
                metadata=ObjectMeta(name="w"),
                spec=PodSpec(
                    restartPolicy="Never",
                    containers=[
                        Container(name="main", image="x", command=[PY, "-c", "print('hi')"])
                    ],
                ),
            )
        )
        for line in stream.iter_lines():
            event = json.loads(line)
            seen.append((event["type"], event["object"]["status"].get("phase")))
            if seen[-1] == ("MODIFIED", "Succeeded") and seen.count(seen[-1]) == 1:
                kc.delete(Pod, "w")
            if event["type"] == "DELETED":
                break
    assert seen[0] == ("ADDED", "Pending")
    assert ("MODIFIED", "Running") in seen and seen[-1][0] == "DELETED"
    assert int(json.loads(line)["object"]["metadata"]["resourceVersion"]) > int(rv)


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

    def gone():
        try:
            kc.get(TrainJob, "long")
        except ApiError as exc:
            return exc.status.code == 404

    wait_for(gone, what="the TrainJob to be deleted")
    assert not [p["pid"] for p in procs if alive(p["pid"])]
    assert not list(kc.list(Job)) and not list(kc.list(Pod)) and not list(kc.list(Service))


def test_apply_json_patch_and_stale_updates(kube_cluster):
    kc = client(kube_cluster)
    cm = ConfigMap(metadata=ObjectMeta(name="applied", labels={"v": "1"}), data={"a": "1"})
    assert kc.apply(cm, field_manager="test").data == {"a": "1"}
    cm.data = {"a": "2"}
    first = kc.apply(cm, field_manager="test")
    assert first.data == {"a": "2"}
    patched = kc.patch(
        ConfigMap,
        "applied",
        [{"op": "add", "path": "/data/b", "value": "3"}],
        patch_type=__import__("lightkube").types.PatchType.JSON,
    )
    assert patched.data == {"a": "2", "b": "3"}
    with pytest.raises(ApiError) as err:
        kc.replace(first)  # first's resourceVersion is stale now
    assert err.value.status.code == 409 and err.value.status.reason == "Conflict"
    pod = Pod(
        metadata=ObjectMeta(name="h"),
        spec=PodSpec(
            hostname="x" * 64,
            containers=[Container(name="main", image="x", command=[PY, "-c", "1"])],
        ),
    )
    with pytest.raises(ApiError) as err:
        kc.create(pod)
    assert err.value.status.code == 422 and "spec.hostname" in err.value.status.message


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
