"""The fake Kubernetes API server (tests/support/kube_fake) as lightkube sees it over HTTP: discovery,
the API server's status codes for invalid objects, watches, and patches."""

from __future__ import annotations

import json

import httpx
import pytest
from lightkube import ApiError
from lightkube.models.core_v1 import Container, PodSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import ConfigMap, Pod
from support.kube_fake import FakeCluster
from support.kube_fake.fixtures import kube_cluster  # noqa: F401 (fixture)
from support.kube_fake.testing import (
    PY,
    ClusterTrainingRuntime,
    TrainJob,
    client,
    indexed_job,
    one_container_pod,
)


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
        kc.create(one_container_pod("w", "print('hi')"))
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
