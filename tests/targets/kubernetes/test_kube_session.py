"""A live session on the kubernetes target (the fake API server, tests/support/kube_fake):
its requests go to the pods as ConfigMaps of the run that each pod watches through the API
server with its service account's token, and the ranks' results come back on the pod logs."""

from __future__ import annotations

import fcntl
import tempfile
from pathlib import Path

import pytest
from conftest import leftover
from support.kube_fake.fixtures import kube_cluster  # noqa: F401 (a fixture)
from support.kube_fake.testing import kube_target
from support.sessions import check_a_session_on

from jupyter_trainer.api.sessions import start_session
from jupyter_trainer.core.errors import CellFailed
from jupyter_trainer.targets.kubernetes.manifests import RDZV_PORT


@pytest.fixture
def rendezvous_port():
    """The pods of a plain Job share this host's network and its fixed rendezvous port."""
    with open(Path(tempfile.gettempdir()) / f"jt-kube-rdzv-{RDZV_PORT}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.mark.slow
@pytest.mark.parametrize(
    "kube_cluster, api_name",
    [({"trainjob_api": False}, "job"), ({"trainjob_api": True}, "trainjob")],
    indirect=["kube_cluster"],
    ids=["job", "trainjob"],
)
def test_a_session_on_two_kube_pods_runs_cells_pulls_and_stops(
    home, kube_cluster, api_name, rendezvous_port, capsys
):
    kube_target(home, kube_cluster, api_name)
    check_a_session_on("kube", nodes=2, procs=1, capsys=capsys)
    names = {
        obj["metadata"]["name"] for obj in kube_cluster.store.list(_configmaps(kube_cluster))[0]
    }
    assert names == set(), names  # the requests went with the run


def _configmaps(cluster):
    return cluster.registry.find("", "v1", "configmaps")


@pytest.mark.slow
def test_large_values_come_back_in_parts_and_a_request_over_a_configmap_fails_clearly(
    home, kube_cluster, rendezvous_port
):
    """A pulled value far over one log line comes back whole (sent in parts); a push over
    the 1 MiB a ConfigMap holds fails on the rank with the reason, and the session goes on."""
    kube_target(home, kube_cluster, "job")
    live = start_session("big", target="kube", procs=1, timeout=180)
    try:
        assert live.pull("bytes(range(256)) * 800") == bytes(range(256)) * 800
        with pytest.raises(
            CellFailed,
            match=r"request is 2.00 MiB .* more than a Kubernetes ConfigMap holds \(1 MiB\)",
        ):
            live.push(blob=b"x" * (2 << 20))
        assert live.pull("'blob' in globals()") is False
    finally:
        assert live.stop() == "completed", live.record.state
    assert leftover(live.id) == []
