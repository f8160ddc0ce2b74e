"""A hot run on nodes reached through the node agent (ssh): each node's launcher is the
pool's (``rankside/hotstart/node_launch.py``, shipped into the run folder with the pool's files) instead
of torchrun, and forks the node's ranks from a warm pool that outlives the run.

Every node's pool is readied (``warm``) before any launcher starts: a hot node's ranks meet
at rank 0's store, torchrun's at its c10d rendezvous, so either every node is hot or the
run is started by torchrun on every node, with the reason in ``state["launcher"]["hot"]``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ...core.spec import RunSpec
from ...launchers.table import Command, LaunchPlan
from ...rankside.hotstart.client import IDLE_ENV, entry_modules
from ...rankside.hotstart.node_launch import IMPORT_SHAPING
from ..folder import NodeLaunch
from .bundle import FOLDER, node_bundle
from .local import environment_id

WARM_TIMEOUT_S = 180.0  # a cold pool imports torch on a loaded node


def pool_args(
    spec: RunSpec,
    plan: LaunchPlan,
    code_dir: str,
    bundle: str,
    *,
    python: str,
    home: str,
    run_dir: str,
    node_rank: int | None,
) -> dict[str, Any]:
    """What a node's pool launcher needs (it reads the ranks' environment from its own).
    ``node_rank`` None: each node takes its own from Slurm (a step of a held allocation)."""
    launch, idle = spec.launch, os.environ.get(IDLE_ENV)
    return {
        "python": python,
        "home": home,
        "bundle": bundle,
        "env_id": json.dumps(environment_id(spec), sort_keys=True, default=str),
        "modules": entry_modules(code_dir, spec.code.entry),
        "idle": float(idle) if idle else None,
        "procs": launch.procs,
        "nodes": launch.nodes,
        "node_rank": node_rank,
        "master_addr": plan.master_addr if node_rank is not None else None,
        "master_port": plan.master_port,
        "elastic_id": plan.run_id,
        "run_id": plan.run_id,
        "run_dir": run_dir,
        "argv": [f"{run_dir}/code/_jt/boot.py", plan.entry, *plan.args],
    }


def launch_args(
    spec: RunSpec, plan: LaunchPlan, item: NodeLaunch, code_dir: str, bundle: str
) -> dict[str, Any]:
    return pool_args(
        spec,
        plan,
        code_dir,
        bundle,
        python=item.node.python,
        home=item.node.workdir,
        run_dir=item.run_dir,
        node_rank=item.node.index,
    )


def _program(item: NodeLaunch) -> str:
    return f"{item.run_dir}/{FOLDER}/launch.py"


def warm_payload(
    item: NodeLaunch, args: Mapping[str, Any], snapshot: str, orphan_timeout: int
) -> dict[str, Any]:
    """The agent's ``start`` request that writes the pool's files into the node's run
    folder and readies its pool, starting nothing of the run. Only the variables that shape
    what the pool imports travel, on the program's command line."""
    command = item.command
    assert command is not None
    launched = {**command.env_defaults, **command.env}
    shaping = {k: v for k, v in launched.items() if k in IMPORT_SHAPING}
    payload = replace(item, command=None, files={**item.files, **node_bundle()[1]}).payload(
        snapshot, orphan_timeout
    )
    warm_args = {**args, "env": shaping, "path_prepend": list(item.path_prepend)}
    payload["warm"] = [item.node.python, _program(item), "warm", json.dumps(warm_args)]
    return payload


def hot_launch(item: NodeLaunch, args: Mapping[str, Any]) -> NodeLaunch:
    """``item`` with the pool's launcher in torchrun's place (same environment)."""
    command = item.command
    assert command is not None
    argv = (item.node.python, _program(item), "run", json.dumps(dict(args)))
    return replace(item, command=Command(argv, command.env, command.env_defaults))


def verdict(hosts: Sequence[str], answers: Sequence[Any]) -> dict[str, Any]:
    """``state["launcher"]["hot"]`` from every node's warm answer (or the error it raised)."""
    why = []
    for host, answer in zip(hosts, answers):
        if isinstance(answer, Exception):
            why.append(f"node {host}: {answer}")
        elif not answer.get("ok"):
            why.append(f"node {host}: {answer.get('why') or answer.get('error')}")
    if why:
        return {"used": False, "why": "; ".join(why)}
    pools = {host: a["pool"] for host, a in zip(hosts, answers)}
    return {
        "used": True,
        "pool": pools[hosts[0]],
        "pools": pools,
        "warm": all(a.get("warm") for a in answers),
        "warm_nodes": {host: bool(a.get("warm")) for host, a in zip(hosts, answers)},
        "key": answers[0].get("key"),
    }
