"""What a Ray cluster offers, asked before a run is created: ``check`` and ``dry_plan`` read
the alive nodes (CPUs, GPUs, python, torch) from a short-lived child driver, ``python -m
jupyter_trainer.targets.ray ADDRESS`` (``main`` here), so a notebook kernel never becomes a
Ray driver just to check a target; ``judge_cluster`` says whether a run fits. ``ray`` is
imported only inside the functions that need it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...core.errors import TargetError
from ...core.files import write_text_atomic
from .config import ADDRESS, NAMESPACE

FACTS_TTL_S = 300  # how long a cluster's facts are reused by later submits
FIX = "start it (ray start --head) or fix address in the target"
VANISHED_TRIES, VANISHED_WITHIN_S = 5, 10.0  # ray.init again while a process vanishes under it


def require_ray() -> None:
    """Raise, naming the fix, when this machine's Python has no Ray to be a driver with."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        raise TargetError(
            "the ray target needs Ray on this machine: pip install "
            "'ray[default]' at the version the cluster runs"
        )


def reachable(address: str, timeout: float) -> None:
    """Raise, naming the fix, when nothing listens at ``address`` (``auto`` is left to Ray)."""
    match = ADDRESS.fullmatch(address)
    if address == "auto" or match is None:
        return
    host, port = match.group("host").strip("[]"), int(match.group("port"))
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        raise TargetError(
            f"the Ray cluster at {address} is unreachable ({exc.strerror or exc}); {FIX}"
        ) from None


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
    argv = [sys.executable, "-m", "jupyter_trainer.targets.ray", address]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as exc:
        said = _last_line(exc.stderr)
        raise TargetError(
            f"the Ray cluster at {address} did not answer within {timeout:.0f} s"
            + (f" (Ray said: {said})" if said else "")
            + f"; {FIX}, or raise connect_timeout in the target on a busy machine"
        ) from None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        why = " ".join((done.stderr or done.stdout).split())[-400:]
        raise TargetError(f"cannot connect to the Ray cluster at {address}: {why}; {FIX}")
    facts = json.loads(lines[-1])
    if facts.get("error"):
        raise TargetError(
            f"cannot connect to the Ray cluster at {address}: {facts['error']}; {FIX}"
        )
    return facts


# Ray's C++ log prefix: "[2026-12-05 20:12:04,654 W 19204 19204] rpc_client.h:638: "
_RAY_LOG_PREFIX = re.compile(r"^\[[^\]]*\]\s*[\w.]+:\d+:\s*")


def _last_line(output: str | bytes | None) -> str:
    """The last non-empty line a timed-out child wrote, without Ray's log prefix, for the
    error that names it."""
    if isinstance(output, bytes):
        output = output.decode(errors="replace")
    lines = [line.strip() for line in (output or "").splitlines() if line.strip()]
    return _RAY_LOG_PREFIX.sub("", lines[-1])[-300:] if lines else ""


def judge_cluster(
    name: str,
    facts: Mapping[str, Any],
    nodes: int,
    procs: int,
    gpus: int,
    autoscaling: bool,
    needs_torch: bool,
) -> None:
    """Raise when the cluster cannot run ``nodes`` x ``procs`` (x ``gpus``) as it stands."""
    alive = facts["nodes"]
    big = [n for n in alive if n["cpus"] >= procs and n["gpus"] >= gpus]
    if len(big) < nodes and not autoscaling:
        need = f"{nodes} node(s) with {procs} CPU(s)" + (f" and {gpus} GPU(s)" if gpus else "")
        have = ", ".join(
            f"{n['address']} {n['cpus']:g} CPU" + (f" {n['gpus']:g} GPU" if n["gpus"] else "")
            for n in alive
        )
        raise TargetError(
            f"the Ray cluster of target {name!r} is too small: the run needs {need}, "
            f"it has {len(alive)} alive node(s) ({have}); ask for fewer nodes or "
            "processes, add nodes, or set autoscaling = true if it grows"
        )
    local = "%d.%d" % sys.version_info[:2]
    for node in alive:
        if node.get("python") and node["python"].rsplit(".", 1)[0] != local:
            raise TargetError(
                f"Ray node {node['address']} runs Python {node['python']} and this "
                f"machine Python {local}; Ray needs the same major.minor on the "
                "driver and the cluster: use a matching Python here or there"
            )
        if needs_torch and node.get("probed") and not node.get("torch"):
            raise TargetError(
                f"Ray node {node['address']} ({node.get('executable')}) cannot "
                "import torch; install torch into the cluster's Python, or set "
                'python = "/path/to/python" in the target'
            )


def connect(ray: Any, address: str, **options: Any) -> None:
    """``ray.init(address=address, **options)``, tried again (a few times, for at most
    ``VANISHED_WITHIN_S``) while it fails only because a process vanished under it.

    Before it connects, ``ray.init`` walks up this process's ancestors with psutil (``uv
    run`` detection, ray/_private/runtime_env/uv_runtime_env_hook.py:317,
    ``psutil.Process().parents()``), which raises ``NoSuchProcess`` for an ancestor that
    exits and is reaped during the walk: a detached supervisor's own parent (procs.detach)
    exits just then, and ``submit`` reaps it. The next walk no longer meets that process.
    Any other failure, or this one once tries or time are spent, is raised as it was."""
    deadline = time.monotonic() + VANISHED_WITHIN_S
    for tries in range(1, VANISHED_TRIES + 1):
        try:
            ray.init(address=address, **options)
            return
        except Exception as exc:
            if not _vanished(exc) or tries == VANISHED_TRIES or time.monotonic() > deadline:
                raise
        if ray.is_initialized():  # nothing is, where psutil raises; a later raise, tidied
            ray.shutdown()
        time.sleep(0.1 * tries)


def _vanished(exc: BaseException | None) -> bool:
    """Whether ``exc``, or an exception it came from, is psutil's ``NoSuchProcess`` (from
    whichever psutil Ray imported: its bundled copy or this environment's)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if any(
            cls.__name__ == "NoSuchProcess" and cls.__module__.split(".")[0] == "psutil"
            for cls in type(exc).__mro__
        ):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _probe(address: str) -> dict[str, Any]:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from ...rankside.programs import ray_actor

    ray.cloudpickle.register_pickle_by_value(ray_actor)
    connect(
        ray,
        address,
        namespace=NAMESPACE,
        log_to_driver=False,
        logging_level=logging.ERROR,
        configure_logging=False,
    )
    alive = [n for n in ray.nodes() if n.get("Alive")]
    task = ray.remote(ray_actor.probe)
    refs = [
        task.options(
            num_cpus=0,
            max_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=n["NodeID"], soft=False),
        ).remote()
        for n in alive
    ]
    probed: dict[str, dict[str, Any]] = {}
    for node, ref in zip(alive, refs):
        try:
            probed[node["NodeID"]] = ray.get(ref, timeout=60)
        except Exception as exc:  # a node that cannot run the probe: Ray's words say why
            probed[node["NodeID"]] = {"error": " ".join(str(exc).split())[:300]}
    out = []
    for node in alive:
        res, info = node.get("Resources", {}), probed[node["NodeID"]]
        out.append(
            {
                "node_id": node["NodeID"],
                "address": node.get("NodeManagerAddress"),
                "cpus": res.get("CPU", 0),
                "gpus": res.get("GPU", 0),
                "python": info.get("python_version"),
                "executable": info.get("python"),
                "torch": info.get("torch"),
                "probed": "error" not in info,
                "error": info.get("error"),
            }
        )
    ray.shutdown()
    return {"nodes": out}


def main(argv: list[str]) -> int:
    try:
        facts = _probe(argv[0])
    except Exception as exc:
        facts = {"error": " ".join(str(exc).split())[:600] or type(exc).__name__}
    print(json.dumps(facts), flush=True)
    return 0
