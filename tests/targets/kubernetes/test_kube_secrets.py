"""A Kubernetes run's secret params and environment variables: the pods' spec.json (in the
run's ConfigMap) holds them redacted, and their values reach the ranks through a Secret of
the run's, made with its other objects and deleted with them."""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import tempfile
from pathlib import Path

import pytest
from conftest import wait_for
from support.kube_fake.fixtures import kube_cluster  # noqa: F401 (a fixture)
from support.kube_fake.testing import kube_target, run_objects

from jupyter_trainer.api import runs as api
from jupyter_trainer.targets.kubernetes.manifests import RDZV_PORT

TOKEN = "hf_" + "Q" * 34
SEEN = hashlib.sha256(TOKEN.encode()).hexdigest()

SCRIPT = f"""
import hashlib, time
from jupyter_trainer import runtime as jt
seen = hashlib.sha256(jt.params["hf_token"].encode()).hexdigest()
print("param", seen == {SEEN!r}, flush=True)
time.sleep(3)
"""


def _objects(cluster, plural: str) -> list[dict]:
    res = cluster.registry.find("", "v1", plural)
    return [
        obj
        for obj in cluster.store.list(res, cluster.namespace)[0]
        if "jupyter-trainer/run-id" in (obj["metadata"].get("labels") or {})
    ]


@pytest.fixture
def api_name(request):
    """As in test_kube_target: a plain Job's pods share this host's network and its fixed
    rendezvous port, so one such run at a time on this machine."""
    if request.param != "job":
        yield request.param
        return
    with open(Path(tempfile.gettempdir()) / f"jt-kube-rdzv-{RDZV_PORT}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield request.param


@pytest.mark.parametrize(
    "kube_cluster, api_name",
    [({"trainjob_api": False}, "job"), ({"trainjob_api": True}, "trainjob")],
    indirect=True,
    ids=["job", "trainjob"],
)
def test_secret_params_reach_the_pods_through_a_secret_of_the_run(home, kube_cluster, api_name):
    kube_target(home, kube_cluster, api_name)
    run = api.submit(SCRIPT, target="kube", nodes=1, procs=1, params={"hf_token": TOKEN})
    made = wait_for(
        lambda: (
            (found := (_objects(kube_cluster, "secrets"), _objects(kube_cluster, "configmaps")))
            and all(found)
            and found
        ),
        120,
        what="the run's Secret and ConfigMap",
    )
    (secret,), (config,) = made
    kept = json.loads(base64.b64decode(secret["data"]["secrets.json"]))
    assert kept["params"] == {"hf_token": TOKEN}
    assert TOKEN not in json.dumps(config)
    assert json.loads(config["data"]["spec.json"])["params"]["hf_token"] == "***"
    run.wait(timeout=180)
    assert run.status == "completed", run.state.get("error")
    assert "param True" in run.logs(0), run.logs(0)
    assert run.state["teardown"]["leftovers"] == []
    assert _objects(kube_cluster, "secrets") == [] and run_objects(kube_cluster) == []
