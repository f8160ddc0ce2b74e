"""A Ray cluster as jupyter_trainer sees it: the target's settings, the facts a submit
checks before anything starts, and the placement group a run reserves.

Ray only provides placement (a placement group of ``--nodes`` bundles of ``--procs`` CPUs,
one per node), processes (an actor per bundle) and transport (calls to those actors); the
run itself goes through the node agent as on ssh hosts. ``ray`` is imported only inside
the functions that need it, so the rest of jupyter_trainer never pays for it.

Run as ``python -m jupyter_trainer.targets.ray_cluster ADDRESS``, it prints the cluster's
facts as JSON: the submit-side check runs it in a child process, so a notebook kernel never
becomes a Ray driver (nor inherits one's state) just to check a target.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..errors import TargetError
from ..files import write_text_atomic
from .ssh_commands import SshConfig

NAMESPACE = "jupyter_trainer"
DEFAULT_WORKDIR = "~/jupyter_trainer_ray"
RAY_KEYS = ("address", "runtime_env", "autoscaling", "shell_persist")
SHARED_KEYS = ("workdir", "python", "gpus_per_node", "env", "connect_timeout", "node_timeout",
               "orphan_timeout", "uv", "env_timeout")
_ADDRESS = re.compile(r"auto|(ray://)?(?P<host>[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\])"
                      r":(?P<port>\d{1,5})")
FACTS_TTL_S = 300        # how long a cluster's facts are reused by later submits
FIX = "start it (ray start --head) or fix address in the target"


@dataclass(frozen=True)
class RayConfig:
    """A ``kind = "ray"`` entry of targets.toml, validated. The settings a Ray target shares
    with an ssh one (workdir, python, env, timeouts, uv) mean the same there."""

    address: str
    runtime_env: Mapping[str, Any] = field(default_factory=dict)
    autoscaling: bool = False          # True: the cluster may grow, so a run waits for nodes
    nodes: SshConfig = field(default_factory=lambda: SshConfig(hosts=()))
    # Seconds a node's shell (the actor that runs the agent) outlives its last run, for the
    # next run to reuse (ssh's ControlPersist, for Ray); 0: one shell per run, ended with it.
    shell_persist: int = 300

    @classmethod
    def from_config(cls, name: str, config: Mapping[str, Any]) -> "RayConfig":
        unknown = sorted(set(config) - set(RAY_KEYS) - set(SHARED_KEYS))
        if unknown:
            raise TargetError(f"target {name!r}: unknown key(s) {unknown}; a ray target takes "
                              f"{', '.join(sorted(RAY_KEYS + SHARED_KEYS))}")
        address = config.get("address")
        if not isinstance(address, str) or not _ADDRESS.fullmatch(address):
            raise TargetError(f"target {name!r}: address must be auto, ray://HOST:PORT or "
                              f"HOST:PORT (the head's GCS), got {address!r}")
        runtime_env = config.get("runtime_env", {})
        if not isinstance(runtime_env, dict) or not all(isinstance(k, str) for k in runtime_env):
            raise TargetError(f"target {name!r}: runtime_env must be a table, e.g. "
                              "runtime_env = { env_vars = { NCCL_DEBUG = \"INFO\" } }")
        env_vars = runtime_env.get("env_vars", {})
        if not isinstance(env_vars, dict):
            raise TargetError(f"target {name!r}: runtime_env.env_vars must be a table of "
                              "NAME = \"value\"")
        autoscaling = config.get("autoscaling", False)
        if not isinstance(autoscaling, bool):
            raise TargetError(f"target {name!r}: autoscaling must be true or false, got "
                              f"{autoscaling!r}")
        persist = config.get("shell_persist", 300)
        if isinstance(persist, bool) or not isinstance(persist, int) or persist < 0:
            raise TargetError(f"target {name!r}: shell_persist must be a number of seconds "
                              f"(0 or more), got {persist!r}")
        shared = {k: config[k] for k in SHARED_KEYS if k in config}
        shared.setdefault("workdir", DEFAULT_WORKDIR)
        shared.setdefault("connect_timeout", 30)
        nodes = SshConfig.from_config(name, {"hosts": ["ray"], **shared})
        return cls(address, dict(runtime_env), autoscaling, nodes, persist)


def require_ray() -> None:
    """Raise, naming the fix, when this machine's Python has no Ray to be a driver with."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        raise TargetError("the ray target needs Ray on this machine: pip install "
                          "'ray[default]' at the version the cluster runs")


def reachable(address: str, timeout: float) -> None:
    """Raise, naming the fix, when nothing listens at ``address`` (``auto`` is left to Ray)."""
    match = _ADDRESS.fullmatch(address)
    if address == "auto" or match is None:
        return
    host, port = match.group("host").strip("[]"), int(match.group("port"))
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        raise TargetError(f"the Ray cluster at {address} is unreachable ({exc.strerror or exc}); "
                          f"{FIX}") from None


def cluster_facts(address: str, timeout: float, cache: Path | None = None) -> dict[str, Any]:
    """The alive nodes (resources, python, torch) of the cluster at ``address``, asked from a
    short-lived child process that connects as a Ray driver.

    With ``cache`` (a folder), an answer younger than ``FACTS_TTL_S`` is reused: asking costs
    seconds (a Python importing Ray, a driver, a task on every node), and a notebook submits
    to one cluster again and again. Every node is checked again by the run's own pre-flight
    before anything starts there, and a node that left makes the run wait in ``queued``."""
    require_ray()
    reachable(address, min(timeout, 10))
    key = hashlib.sha256(address.encode()).hexdigest()[:16]
    path = cache / f"ray-{key}.json" if cache else None
    try:
        kept = json.loads(path.read_text()) if path else None
    except (OSError, ValueError):
        kept = None
    if kept and 0 <= time.time() - kept.get("at", 0) < FACTS_TTL_S:
        return kept["facts"]
    facts = _ask(address, timeout)
    if path is not None:
        write_text_atomic(path, json.dumps({"at": time.time(), "facts": facts}))
    return facts


def _ask(address: str, timeout: float) -> dict[str, Any]:
    argv = [sys.executable, "-m", "jupyter_trainer.targets.ray_cluster", address]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise TargetError(f"the Ray cluster at {address} did not answer within {timeout:.0f} s; "
                          f"{FIX}") from None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        why = " ".join((done.stderr or done.stdout).split())[-400:]
        raise TargetError(f"cannot connect to the Ray cluster at {address}: {why}; {FIX}")
    facts = json.loads(lines[-1])
    if facts.get("error"):
        raise TargetError(f"cannot connect to the Ray cluster at {address}: {facts['error']}; "
                          f"{FIX}")
    return facts


def judge_cluster(name: str, facts: Mapping[str, Any], nodes: int, procs: int, gpus: int,
                  autoscaling: bool, needs_torch: bool) -> None:
    """Raise when the cluster cannot run ``nodes`` x ``procs`` (x ``gpus``) as it stands."""
    alive = facts["nodes"]
    big = [n for n in alive if n["cpus"] >= procs and n["gpus"] >= gpus]
    if len(big) < nodes and not autoscaling:
        need = f"{nodes} node(s) with {procs} CPU(s)" + (f" and {gpus} GPU(s)" if gpus else "")
        have = ", ".join(f"{n['address']} {n['cpus']:g} CPU" + (f" {n['gpus']:g} GPU" if n['gpus']
                                                              else "") for n in alive)
        raise TargetError(f"the Ray cluster of target {name!r} is too small: the run needs {need}, "
                          f"it has {len(alive)} alive node(s) ({have}); ask for fewer nodes or "
                          "processes, add nodes, or set autoscaling = true if it grows")
    local = "%d.%d" % sys.version_info[:2]
    for node in alive:
        if node.get("python") and node["python"].rsplit(".", 1)[0] != local:
            raise TargetError(f"Ray node {node['address']} runs Python {node['python']} and this "
                              f"machine Python {local}; Ray needs the same major.minor on the "
                              "driver and the cluster: use a matching Python here or there")
        if needs_torch and node.get("probed") and not node.get("torch"):
            raise TargetError(f"Ray node {node['address']} ({node.get('executable')}) cannot "
                              "import torch; install torch into the cluster's Python, or set "
                              "python = \"/path/to/python\" in the target")


def _probe(address: str) -> dict[str, Any]:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from ..nodes import ray_actor

    ray.cloudpickle.register_pickle_by_value(ray_actor)
    ray.init(address=address, namespace=NAMESPACE, log_to_driver=False,
             logging_level="ERROR", configure_logging=False)
    alive = [n for n in ray.nodes() if n.get("Alive")]
    task = ray.remote(ray_actor.probe)
    refs = [task.options(num_cpus=0, max_retries=0, scheduling_strategy=
                         NodeAffinitySchedulingStrategy(node_id=n["NodeID"], soft=False)).remote()
            for n in alive]
    probed: dict[str, dict[str, Any]] = {}
    for node, ref in zip(alive, refs):
        try:
            probed[node["NodeID"]] = ray.get(ref, timeout=60)
        except Exception as exc:  # a node that cannot run the probe: Ray's words say why
            probed[node["NodeID"]] = {"error": " ".join(str(exc).split())[:300]}
    out = []
    for node in alive:
        res, info = node.get("Resources", {}), probed[node["NodeID"]]
        out.append({"node_id": node["NodeID"], "address": node.get("NodeManagerAddress"),
                    "cpus": res.get("CPU", 0), "gpus": res.get("GPU", 0),
                    "python": info.get("python_version"), "executable": info.get("python"),
                    "torch": info.get("torch"), "probed": "error" not in info,
                    "error": info.get("error")})
    ray.shutdown()
    return {"nodes": out}


def main(argv: list[str]) -> int:
    try:
        facts = _probe(argv[0])
    except Exception as exc:
        facts = {"error": " ".join(str(exc).split())[:600] or type(exc).__name__}
    print(json.dumps(facts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
