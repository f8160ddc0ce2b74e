"""A live session on the kubernetes target (the fake API server, tests/support/kube_fake):
its requests go to the pods as ConfigMaps of the run that each pod watches through the API
server with its service account's token, and the ranks' results come back on the pod logs."""

from __future__ import annotations

import fcntl
import tempfile
from pathlib import Path

import pytest
from support.kube_fake.fixtures import kube_cluster  # noqa: F401 (a fixture)
from support.kube_fake.testing import kube_target
from support.sessions import check_a_session_on

from jupyter_trainer.targets.kubernetes.manifests import RDZV_PORT


@pytest.fixture
def rendezvous_port():
    """The pods of a plain Job share this host's network and its fixed rendezvous port."""
    with open(Path(tempfile.gettempdir()) / f"jt-kube-rdzv-{RDZV_PORT}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.mark.slow
def test_a_session_on_two_kube_pods_runs_cells_pulls_and_stops(
    home, kube_cluster, rendezvous_port, capsys
):
    kube_target(home, kube_cluster, "job")
    check_a_session_on("kube", nodes=2, procs=1, capsys=capsys)
    names = {
        obj["metadata"]["name"] for obj in kube_cluster.store.list(_configmaps(kube_cluster))[0]
    }
    assert names == set(), names  # the requests went with the run


def _configmaps(cluster):
    return cluster.registry.find("", "v1", "configmaps")
