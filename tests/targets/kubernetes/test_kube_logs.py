"""Following a pod's log when its container restarts in place: every instance's output
reaches the run folder, in order, whether the follower was there from the start or came
after the first instance had already ended (a loaded machine, a slow API server)."""

from __future__ import annotations

import json
import sys
import threading

import pytest
from conftest import wait_for
from support.kube_fake.fixtures import kube_cluster  # noqa: F401 (a fixture)

from jupyter_trainer.nodes.mirror import LocalFiles
from jupyter_trainer.rankside.programs.kube_pod import MARK
from jupyter_trainer.targets.kubernetes import stream
from jupyter_trainer.targets.kubernetes.cluster import Cluster
from jupyter_trainer.targets.kubernetes.config import KubeConfig

# The first instance records rank 3's failure and exits 1; the one after it says so and ends.
TWICE = f"""
import base64, json, os, sys, time
first = not os.path.exists("/state/ran")
open("/state/ran", "w").close()
if first:
    print("instance 0 starts", flush=True)
    time.sleep(float(sys.argv[1]))
    record = base64.b64encode(json.dumps({{"rank": 3, "exit_code": 1}}).encode()).decode()
    print({MARK!r} + json.dumps({{"f": "ranks/rank-3.json", "w": record}}), flush=True)
    sys.exit(1)
print("instance 1 starts", flush=True)
time.sleep(float(sys.argv[1]))
print("instance 1 ends", flush=True)
"""


def restarting_pod(name: str, linger: float) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "OnFailure",
            "volumes": [{"name": "state", "emptyDir": {}}],
            "containers": [
                {
                    "name": "node",
                    "image": "python:3.11",
                    "command": [sys.executable, "-c", TWICE, str(linger)],
                    "volumeMounts": [{"name": "state", "mountPath": "/state"}],
                }
            ],
        },
    }


@pytest.mark.parametrize("attach", ["from_the_start", "after_the_restart"])
def test_every_instance_of_a_restarted_container_reaches_the_run(kube_cluster, tmp_path, attach):
    cluster = Cluster(KubeConfig(kubeconfig=str(kube_cluster.kubeconfig)), "kube")
    # long enough for the follower to attach while the first instance runs
    cluster.create(restarting_pod("twice", 2.0 if attach == "from_the_start" else 0.0))
    files = LocalFiles(str(tmp_path / "run"))
    log = stream.PodLog(files, 0, "twice")

    def instance() -> tuple[str, int, bool] | None:
        found = cluster.pod_instance("twice")
        return found if found and found[2] else None

    if attach == "from_the_start":
        wait_for(lambda: (instance() or ("", 1))[1] == 0, 60, what="the first instance")
    else:
        wait_for(
            lambda: (
                (instance() or ("", 0))[1] == 1
                and b"instance 1 starts" in b"".join(cluster.log_lines("twice"))
            ),
            60,
            what="the second instance",
        )
    follower = threading.Thread(target=stream.follow, args=(cluster, "twice", log, 5, 0.2))
    follower.start()
    follower.join(60)
    try:
        assert not follower.is_alive(), "the follower did not end with the pod"
        assert cluster.pod_instance("twice") == ("Succeeded", 1, True)
        launcher = (tmp_path / "run" / "logs" / "launcher.log").read_text().splitlines()
        assert launcher == [
            "[twice] instance 0 starts",
            "[twice] instance 1 starts",
            "[twice] instance 1 ends",
        ], launcher
        record = json.loads((tmp_path / "run" / "ranks" / "rank-3.json").read_text())
        assert record == {"rank": 3, "exit_code": 1}
    finally:
        cluster.delete("Pod", "twice", grace=0)
        wait_for(lambda: not kube_cluster.processes(), 30, what="the pod's processes to end")
        cluster.close()
