"""The ray target's connection to its cluster (targets/ray/cluster.py): a process that
vanishes while ``ray.init`` walks up the driver's ancestors is tried again, any other failure
is not; a cluster that never answers the check is named with what Ray said."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap

import psutil
import pytest

from jupyter_trainer.core.errors import TargetError
from jupyter_trainer.targets.ray import cluster

# A driver that meets, on its first ancestor walk in ``ray.init`` (Ray's ``uv run`` check,
# ray/_private/runtime_env/uv_runtime_env_hook.py: ``psutil.Process().parents()``), an
# ancestor that has just exited and been reaped; every later walk is the real one.
DRIVER = textwrap.dedent(
    """
    import json, subprocess, sys
    from ray._private.runtime_env import uv_runtime_env_hook
    from jupyter_trainer.targets.ray import cluster
    from jupyter_trainer.targets.ray.target import RayTarget

    Process = uv_runtime_env_hook.psutil.Process
    real_parents, armed, seen = Process.parents, [], []

    def parents(self):
        if not armed:
            return real_parents(self)
        armed.clear()
        child = subprocess.Popen([sys.executable, "-c", ""])
        gone = Process(child.pid)  # an ancestor, as the walk has just found it...
        child.wait()  # ...exits and is reaped, as procs.detach's parent is by submit
        try:
            return real_parents(gone)  # psutil's own NoSuchProcess, walking on from it
        except Exception as exc:
            seen.append(repr(exc))
            raise

    Process.parents = parents
    address = sys.argv[1]
    armed.append(1)
    cluster.main([address])  # the facts check's child driver: prints its JSON line
    armed.append(1)
    ray = RayTarget("rc", {"address": address})._connect()  # the supervisor's driver
    nodes = sum(1 for n in ray.nodes() if n["Alive"])
    ray.shutdown()
    print(json.dumps({"connected_nodes": nodes, "vanished": seen}), flush=True)
    """
)


def test_a_process_vanishing_under_ray_init_does_not_fail_the_connection(ray_cluster):
    """Under load, a resumed run failed 0.13 s after it was created with "cannot connect to
    the Ray cluster at ...: process no longer exists (pid=...)": its supervisor's
    ``ray.init`` walked up to the supervisor's pre-detach parent just as that exited and was
    reaped. Which instant that happens at cannot be arranged from outside, so the driver
    here replaces the one psutil call Ray makes (``Process.parents``) for its first call
    only: that call walks up from a real process that has just exited and been reaped, and
    psutil raises ``NoSuchProcess`` itself; later calls are psutil's, unchanged. Both
    drivers (the facts check and the target's connection) must connect all the same."""
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, ray_cluster.address],
        env=ray_cluster.env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-1500:] + done.stderr[-1500:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    facts, connected = lines
    assert "error" not in facts and len(facts["nodes"]) == 2, facts
    assert connected["connected_nodes"] == 2
    assert len(connected["vanished"]) == 2  # the race happened, in each driver
    assert all("NoSuchProcess" in why for why in connected["vanished"])


class _Ray:
    """Stands in for ``ray`` where only ``connect``'s own decisions are at stake: ``init``
    raises each of ``errors`` in turn, then succeeds."""

    def __init__(self, *errors: Exception) -> None:
        self.errors, self.calls = list(errors), 0

    def init(self, **options: object) -> None:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)

    def is_initialized(self) -> bool:
        return False


def test_connect_tries_again_only_while_a_process_vanishes(monkeypatch):
    """A genuine connection error is raised at once; a vanishing process is tried again, a
    bounded number of times."""
    monkeypatch.setattr(cluster.time, "sleep", lambda s: None)
    gone = psutil.NoSuchProcess(12345)
    ray = _Ray(gone, gone)
    cluster.connect(ray, "127.0.0.1:1")
    assert ray.calls == 3
    wrapped = RuntimeError("Failed to connect")
    wrapped.__cause__ = gone
    ray = _Ray(wrapped)
    cluster.connect(ray, "127.0.0.1:1")
    assert ray.calls == 2
    refused = ConnectionError("Failed to connect to GCS at 127.0.0.1:1")
    ray = _Ray(refused, refused)
    with pytest.raises(ConnectionError):
        cluster.connect(ray, "127.0.0.1:1")
    assert ray.calls == 1
    ray = _Ray(*[gone] * (cluster.VANISHED_TRIES + 1))
    with pytest.raises(psutil.NoSuchProcess):
        cluster.connect(ray, "127.0.0.1:1")
    assert ray.calls == cluster.VANISHED_TRIES


def test_a_cluster_that_never_answers_is_named_with_what_ray_said(monkeypatch, tmp_path):
    """Something listens at the address but never speaks Ray's protocol: the check's child
    driver is ended at the limit, and the error says what Ray last wrote and how to give a
    busy machine more time. Nothing is cached, and no driver is left."""
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # Ray dials 127.0.0.1 itself
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(TargetError) as info:
            cluster.cluster_facts(address, timeout=60, cache=tmp_path)
    said = str(info.value)
    # Ray says in turn that it cannot reach the GCS, its pubsub, or get the cluster's id
    assert said.startswith(
        f"the Ray cluster at {address} did not answer within 60 s (Ray said: Failed to "
    ), said
    assert said.endswith(
        "start it (ray start --head) or fix address in the target, or raise connect_timeout "
        "in the target on a busy machine"
    ), said
    assert list(tmp_path.iterdir()) == []
    drivers = [
        p.pid for p in psutil.process_iter(["cmdline"]) if address in (p.info["cmdline"] or [])
    ]
    assert drivers == []
