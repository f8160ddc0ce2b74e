"""pytest fixtures over FakeCluster (import them into a test module or conftest)."""

from __future__ import annotations

import pytest

from .cluster import FakeCluster


@pytest.fixture
def kube_cluster(tmp_path, request):
    """A started FakeCluster. Parametrize indirectly with a dict of FakeCluster's keyword
    arguments (e.g. ``{"trainjob_api": True}``) to change it. At the end every pod process is
    killed, and the test fails if the cluster's control loop raised or processes were left."""
    kwargs = getattr(request, "param", None) or {}
    with FakeCluster(tmp_path, **kwargs) as cluster:
        yield cluster
    left = cluster.processes()
    assert not left, f"pod processes left after teardown: {left}"
    assert not cluster.errors, "the fake cluster's control loop failed:\n" + "\n".join(
        cluster.errors
    )
