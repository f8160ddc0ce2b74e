"""A Kubernetes target with a Kueue LocalQueue (``queue = "NAME"``): the run's TrainJob is
created suspended in that queue, waits while the queue's quota is held by another run, and
says why and where it stands (the Workload's reason, its place among the pending workloads
from Kueue's visibility API) until Kueue admits it. Kueue is the fake cluster's
(tests/support/kube_fake/kueue.py): first come, first served within a CPU quota."""

from __future__ import annotations

import pytest
from conftest import wait_for
from support.kube_fake.fixtures import kube_cluster  # noqa: F401 (a fixture)
from support.kube_fake.testing import kube_target, run_objects

from jupyter_trainer.api import runs as api
from jupyter_trainer.frontends.views.queue_text import waiting_words

KUEUE = {"trainjob_api": True, "kueue": {"team": "2"}}  # two CPUs: one run at a time

FIRST = "import time\ntime.sleep(8)\nprint('first')\n"
SECOND = "print('second')\n"


@pytest.mark.parametrize("kube_cluster", [KUEUE], indirect=True, ids=["kueue"])
def test_a_run_waits_in_its_kueue_queue_and_says_where_it_stands(home, kube_cluster):
    kube_target(home, kube_cluster, "trainjob", queue="team", resources={"requests": {"cpu": "2"}})
    first = api.submit(FIRST, target="kube", launcher="python", name="kueue-first")
    second = None
    try:
        wait_for(lambda: first.status == "running", timeout=90, what="the first run to start")
        second = api.submit(SECOND, target="kube", launcher="python", name="kueue-second")
        state = wait_for(
            lambda: (s := second.state).get("queue", {}).get("position") and s,
            timeout=60,
            what="the second run's place in the queue",
        )
        queue = state["queue"]
        assert state["status"] == "queued"
        assert (queue["local_queue"], queue["position"], queue["pending"]) == ("team", 1, 1)
        assert queue["workload"].startswith("trainjob-")
        assert queue["reason"] == (
            f"Kueue workload {queue['workload']}: couldn't assign flavors to pod set main: "
            "insufficient unused quota for cpu in flavor default-flavor, 2 more needed"
        ), queue
        words = waiting_words(queue, 0.0)
        assert words.startswith("waiting: Kueue workload ") and words.endswith(
            "; 1st of 1 pending in queue team"
        ), words
        first.wait(timeout=120)
        second.wait(timeout=120)  # admitted once the first run's quota is free again
        assert "second" in second.logs(0)
        # it ran once the first had done its 8 s
        began = first.state["stages"]["running"]["start"]
        assert second.state["stages"]["running"]["start"] >= began + 7.5, second.state["stages"]
    finally:
        for run in (second, first):
            if run is not None and run.status not in ("completed", "failed", "canceled"):
                run.cancel(timeout=90)
    assert kube_cluster.processes() == [] and run_objects(kube_cluster) == []


def test_a_queue_that_is_not_a_queue_name_is_refused():
    from jupyter_trainer.core.errors import TargetError
    from jupyter_trainer.targets.kubernetes.config import KubeConfig

    assert KubeConfig.from_config("kube", {"queue": "team-a"}).queue == "team-a"
    with pytest.raises(TargetError, match="target 'kube': queue must be a Kubernetes object name"):
        KubeConfig.from_config("kube", {"queue": "Team A"})
