"""A real two-node Ray cluster on this machine, every listener on 127.0.0.1.

A head (``ray start --head --block``) and a second node (Ray's ``Node``), each started by a
small driver (``HEAD_NODE``, ``SECOND_NODE``) in its own process group (so the test owns
their PIDs and never needs ``ray stop``, which would end every Ray on the machine), with 2
CPUs, its own temp folder and its own ports: a block of ``BLOCK`` inside 10100-16099 that the
xdist worker holds (``port_blocks``: never one another test session holds), Ray's worker
ports included (given explicitly, so Ray's default worker range is never used): the head's
GCS, dashboard API server and Ray Client server at the block's start, then each node's own
ports and worker range (``node_ports``), all inside the block. ``stop`` ends both groups and
checks that no process of the cluster is left.

The head runs what the ray target uses (the GCS, each node's raylet and agents) and leaves
out what it does not, the dashboard's modules and the autoscaler's monitor, which cost CPU
all the while a cluster is up.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from support.daemons import die_with_this_process
from support.port_blocks import held_block

BLOCK = 120  # ports of one cluster
NODE_AT = (10, 60)  # where in the block each node's ports start
PORTS_PER_NODE = 50  # each node's: 10 of its own (6 used), then its workers'
ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
# The connect_timeout of the targets the tests make on this cluster. A run's check asks the
# cluster from a new driver, whose Ray workers on both nodes start for it (targets/ray/
# cluster.py), and gives it connect_timeout + 30 s. Beside another suite that took 22-36 s
# and at times over 60, the limit of the default connect_timeout (30).
CONNECT_TIMEOUT = 120
# The most ``start_cluster`` takes, retries included; a test that may be the one to start its
# worker's cluster has this on top of its own time (``conftest``).
START_WITHIN = 600.0
# A node's raylet ends itself when its dashboard agent (a Python process, seconds of imports)
# has not written its port within 15 s, a limit Ray does not let one change and that a machine
# running other test suites exceeds: each node starts at this priority (where the session may
# raise it), which every process it starts inherits, and is set back to normal once it is up.
# Where the kernel groups processes by session for the scheduler (sched_autogroup_enabled),
# a nice value counts only against the processes of the same session, and CPU is shared
# between sessions first: a node, started in a session of its own, has its session's group
# raised as well.
BOOST = -20


# Ray's Node gives the GCS a hard-coded 30 s to register a new node's raylet, which waits for
# its agents (Python processes) first: too little on a loaded machine, where ``ray start
# --head`` then gives up with "The current node timed out during startup". Each node is
# started by a driver that lets every lookup of the node wait up to 150 s instead, while
# the node's raylet lives (one that ended itself is not waited for).
PATIENT = """
import json, os, signal, sys, threading, time
import ray._private.services as services

def _raylet_alive(node_id):
    needle = f"--node_id={node_id}".encode()
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if needle in fh.read():
                    return True
        except (OSError, ValueError):
            continue
    return False

_get_node = services.get_node
def _patient_get_node(gcs_address, node_id, *args, **kwargs):
    deadline = time.monotonic() + 150
    while True:
        try:
            return _get_node(gcs_address, node_id, *args, **kwargs)
        except RuntimeError:
            if time.monotonic() > deadline or not _raylet_alive(node_id):
                raise
            time.sleep(0.5)
services.get_node = _patient_get_node
"""

# The head: ``ray start`` (its command line after the driver) with that patience.
HEAD_NODE = (
    PATIENT
    + """
from ray.scripts.scripts import main
sys.argv = ["ray", *sys.argv[1:]]
main()
"""
)

# ``ray start`` refuses to add a node to a head in its loopback-only mode, so the second node
# is started the way ray.cluster_utils starts one, by a small driver of Ray's Node.
SECOND_NODE = (
    PATIENT
    + """
from ray._private.node import Node
from ray._private.parameter import RayParams

gcs, cpus, ports = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
params = RayParams(
    node_ip_address="127.0.0.1", gcs_address=gcs, num_cpus=cpus, include_log_monitor=False,
    **ports)
node = Node(params, head=False, shutdown_at_exit=True, spawn_reaper=False)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("node up", flush=True)
threading.Event().wait()
"""
)


def _block(worker: int) -> int:
    return held_block("ray", 10100, BLOCK, 50, worker)


def node_ports(base: int) -> dict[str, int]:
    """One node's fixed ports (from ``base``) and its worker range after them, as Ray's
    ``RayParams`` names them."""
    names = (
        "node_manager_port",
        "object_manager_port",
        "metrics_agent_port",
        "dashboard_agent_listen_port",
        "metrics_export_port",
        "runtime_env_agent_port",
    )
    ports = {name: base + i for i, name in enumerate(names)}
    ports["min_worker_port"] = base + 10
    ports["max_worker_port"] = base + PORTS_PER_NODE - 1
    return ports


def _flags(ports: dict[str, int]) -> list[str]:
    """``node_ports`` as ``ray start``'s options (its name for the metrics agent's port is
    ``--dashboard-agent-grpc-port``)."""
    rename = {"metrics_agent_port": "dashboard_agent_grpc_port"}
    return [f"--{rename.get(k, k).replace('_', '-')}={v}" for k, v in ports.items()]


@dataclass
class RayCluster:
    root: Path
    gcs_port: int
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    def env(self) -> dict[str, str]:
        return {**os.environ, **ENV}

    def processes(self) -> list[str]:
        """Processes of this cluster still alive: their command line or environment names its
        temp folder."""
        needle = str(self.root).encode()
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            try:
                with open(f"/proc/{name}/cmdline", "rb") as fh:
                    cmd = fh.read()
                with open(f"/proc/{name}/environ", "rb") as fh:
                    env = fh.read()
            except OSError:
                continue
            if needle in cmd or needle in env:
                words = cmd.replace(b"\0", b" ").decode(errors="replace")[:150]
                found.append(f"{name} {words}")
        return found

    def stop(self) -> list[str]:
        """SIGTERM, then SIGKILL, to each node's process group; what is left afterwards."""
        for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 10.0)):
            for proc in self.procs:
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and self.processes():
                time.sleep(0.2)
            if not self.processes():
                break
        for proc in self.procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        left = self.processes()
        shutil.rmtree(self.root, ignore_errors=True)
        return left


def node_argvs(base: int, root: Path, cpus: int) -> tuple[list[str], list[str]]:
    """The command lines of the head and of the second node of a cluster on the port block
    from ``base``."""
    head = [
        sys.executable,
        "-c",
        HEAD_NODE,
        "start",
        "--head",
        f"--port={base}",
        "--include-dashboard=false",  # its API server alone, on the block's port
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={base + 1}",
        f"--ray-client-server-port={base + 2}",
        "--no-monitor",
        f"--temp-dir={root}",
        "--block",
        "--node-ip-address=127.0.0.1",
        f"--num-cpus={cpus}",
        "--disable-usage-stats",
        *_flags(node_ports(base + NODE_AT[0])),
    ]
    ports = json.dumps(node_ports(base + NODE_AT[1]))
    second = [sys.executable, "-c", SECOND_NODE, f"127.0.0.1:{base}", str(cpus), ports]
    return head, second


def start_cluster(worker: int = 0, cpus: int = 2, nodes: int = 2) -> RayCluster:
    base = _block(worker)
    root = Path(tempfile.mkdtemp(prefix="jtray-", dir="/tmp"))  # Ray's socket paths are short
    cluster = RayCluster(root, gcs_port=base)
    head, second = node_argvs(base, root, cpus)
    deadline = time.monotonic() + START_WITHIN
    try:
        # A node gives up when its own processes have not come up, or the GCS has not
        # registered it, within Ray's own limits, which a loaded machine can exceed: what is
        # left of it is ended and it is started again while START_WITHIN leaves time.
        for argv, log, count in ((head, "head.log", 1), (second, "node.log", 2))[:nodes]:
            attempt = 0
            while True:
                attempt += 1
                _start(cluster, argv, log)
                try:
                    _wait_nodes(cluster, count, min(180.0, deadline - time.monotonic()))
                    break
                except RuntimeError as exc:
                    within = min(60.0, deadline - time.monotonic() - 30)
                    if within <= 0 or not _gave_up(cluster.procs[-1], within):
                        raise RuntimeError(f"{log.split('.')[0]}, try {attempt}: {exc}") from None
                    _end_group(cluster.procs.pop())
    except BaseException:
        cluster.stop()
        raise
    _unboost(cluster)
    return cluster


def _gave_up(proc: subprocess.Popen, within: float = 60.0) -> bool:
    """Whether a node that has not joined gave up: its ``ray start`` exits once Ray's own
    limit has passed, which on a loaded machine can come after the driver's check did."""
    try:
        proc.wait(timeout=within)
    except subprocess.TimeoutExpired:
        return False
    return True


def _end_group(proc: subprocess.Popen) -> None:
    """End what is left of a node that failed to start: its process group."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and _group_alive(proc.pid):
        time.sleep(0.2)


def _group_alive(pgid: int) -> bool:
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and os.getpgid(int(name)) == pgid:
                return True
        except OSError:
            continue
    return False


def _boosted() -> Callable[[], None]:
    """A ``preexec_fn`` for a process of the cluster's start: it ends with this process (a
    killed test session takes it along), and runs at ``BOOST`` where this process may raise
    it (root), which the processes it starts inherit."""
    arrange = die_with_this_process()

    def boost() -> None:
        arrange()
        try:
            os.setpriority(os.PRIO_PROCESS, 0, BOOST)
        except PermissionError:
            pass
        if os.getsid(0) == os.getpid():  # never the group of the session that started it
            _session_nice(os.getpid(), BOOST)

    return boost


def _session_nice(leader: int, nice: int) -> None:
    """The nice value of the scheduler's group of the session ``leader`` leads, where the
    kernel has such groups and this process may set it."""
    try:
        with open(f"/proc/{leader}/autogroup", "w") as f:
            f.write(str(nice))
    except OSError:
        pass


def _unboost(cluster: RayCluster) -> None:
    """Every thread and session of the cluster back at the normal priority, so that the
    workers it starts for the tests' runs compete with the rest of the machine as any
    process does."""
    for proc in cluster.procs:
        _session_nice(proc.pid, 0)
    for line in cluster.processes():
        pid = line.split(maxsplit=1)[0]
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                os.setpriority(os.PRIO_PROCESS, int(tid), 0)
            except OSError:
                pass


def _start(cluster: RayCluster, argv: list[str], log: str) -> None:
    with open(cluster.root / log, "ab") as out:
        cluster.procs.append(
            subprocess.Popen(
                argv,
                env=cluster.env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=cluster.root,
                preexec_fn=_boosted(),
            )
        )


# Reports the number of live nodes every half second, from one connection: each new driver
# would cost seconds of CPU (importing ray, registering a job, its workers).
WAIT_DRIVER = """
import sys, time, ray
while True:
    try:
        if not ray.is_initialized():
            ray.init(address=sys.argv[1], logging_level="ERROR")
        print(sum(1 for n in ray.nodes() if n["Alive"]), flush=True)
    except Exception as exc:
        print("no answer:", str(exc).splitlines()[0][:200] if str(exc) else repr(exc), flush=True)
        ray.shutdown()
    time.sleep(0.5)
"""


def _wait_nodes(cluster: RayCluster, count: int, timeout: float = 180.0) -> None:
    """Until ``count`` nodes are alive (asked through a child driver, as a user's would). A
    driver silent for 60 s (a loaded machine) is replaced by a new one while time is left."""
    deadline = time.monotonic() + timeout
    last = "no driver answered"
    while time.monotonic() < deadline and not any(p.poll() is not None for p in cluster.procs):
        driver = subprocess.Popen(
            [sys.executable, "-c", WAIT_DRIVER, cluster.address],
            env=cluster.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            preexec_fn=_boosted(),  # part of the start
        )
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in driver.stdout], daemon=True).start()
        try:
            while time.monotonic() < deadline:
                if any(p.poll() is not None for p in cluster.procs):
                    break
                try:
                    last = lines.get(timeout=min(60.0, max(0.1, deadline - time.monotonic())))
                except queue.Empty:
                    last = "no answer from a driver within 60 s"
                    break
                last = last.strip()
                if last.isdigit() and int(last) >= count:
                    return
                if driver.poll() is not None and lines.empty():
                    break
        finally:
            driver.kill()
            driver.wait()
    raise RuntimeError(f"the Ray cluster did not reach {count} node(s): {last}\n{_logs(cluster)}")


# What a node's own logs say when it ended itself: a failed check, a time limit, an exception.
FATAL = re.compile(r"Check failed|Timed out|\bC \d+ \d+\]|Exception:|Error:")


def _logs(cluster: RayCluster) -> str:
    """The tails of the nodes' own output and of the GCS's and raylets' logs, which say why a
    node did not come up (the ``ray start`` output says only that it timed out)."""
    logs = cluster.root / "session_latest" / "logs"
    found = [cluster.root / "head.log", cluster.root / "node.log"]
    found += sorted(logs.glob("gcs_server.*")) + sorted(logs.glob("raylet*.*"))
    parts = []
    for path in found:
        if not path.is_file() or not path.stat().st_size:
            continue
        text = path.read_text(errors="replace")
        fatal = [line[:400] for line in text.splitlines() if FATAL.search(line)][:5]
        parts.append(f"--- {path.name}\n" + "".join(f"{line}\n" for line in fatal))
        parts.append(f"(its end:)\n{text[-1000:]}\n")
    return "".join(parts)
