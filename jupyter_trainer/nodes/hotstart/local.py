"""A ``--hot`` run on the local target: its ranks, as torchrun would start them, forked by
the pool for the run's interpreter, environment and modules."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ...core.errors import TargetError
from ...core.spec import RunSpec
from ...core.workspace import settings
from ...launchers.table import Command, LaunchPlan
from ...rankside.host import procs
from ...rankside.host.home import default_home
from ...rankside.hotstart.client import (
    PoolRun,
    PoolUnavailable,
    entry_modules,
    error_dir,
    new_elastic_id,
    pool_key,
    start_ranks,
    torchrun_env,
)

# Variables that change what the pool's imports load; the rest of its environment does not
# matter, since each rank gets its own whole environment.
_IMPORT_SHAPING = (
    "PYTHONPATH",
    "PYTHONHOME",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "VIRTUAL_ENV",
    "CUDA_HOME",
    "CUDA_VISIBLE_DEVICES",
)


def pools_home(home: Path | None = None) -> Path:
    """The folder whose ``pools/`` holds this user's pools: their own folder of the store
    (``Settings.user_dir``: the store itself when it is personal, ``users/<name>/`` in a
    workspace), so that no member connects to, or signals, another member's pool."""
    return settings(Path(home) if home is not None else default_home()).user_dir()


def environment_id(spec: RunSpec) -> dict[str, Any]:
    """What names the run's environment: a redefined or rebuilt one gets another pool (the
    pre-flight's timings and findings, which vary from run to run, are left out)."""
    env = asdict(spec.env)
    prepared = env.pop("prepared", None) or {}
    return {
        **env,
        "env_id": prepared.get("env_id"),
        "base_python": prepared.get("base_python"),
        "built_at": prepared.get("built_at"),
    }


def start_in_pool(
    spec: RunSpec,
    plan: LaunchPlan,
    command: Command,
    base: dict[str, str],
    run_dir: str,
    log_path: str,
) -> tuple[PoolRun, dict[str, Any]]:
    """Fork the run's ranks in its pool; the PoolRun to follow them and the run's handle.
    TargetError (with the reason) when the pool cannot, so the caller starts torchrun."""
    try:
        return _start_in_pool(spec, plan, command, base, run_dir, log_path)
    except TargetError:
        raise
    except Exception as exc:  # the pool only saves time: whatever stops it, torchrun runs
        raise TargetError(f"the pool could not be used ({type(exc).__name__}: {exc})") from exc


def _start_in_pool(
    spec: RunSpec,
    plan: LaunchPlan,
    command: Command,
    base: dict[str, str],
    run_dir: str,
    log_path: str,
) -> tuple[PoolRun, dict[str, Any]]:
    env = command.environ(base)  # exactly what torchrun itself would get
    elastic_id = new_elastic_id()
    errors = error_dir(run_dir, elastic_id)
    world = spec.launch.procs
    ranks = [
        {
            "rank": r,
            "env": torchrun_env(
                env,
                rank=r,
                world_size=world,
                master_port=plan.master_port,
                elastic_id=elastic_id,
                error_dir=errors,
            ),
        }
        for r in range(world)
    ]
    # The pool holds the rendezvous port from the moment it picks it (see rankside/hotstart/server.py).
    request = {
        "run_id": plan.run_id,
        "run_dir": run_dir,
        "cwd": run_dir,
        "log": log_path,
        "argv": [plan.boot, plan.entry, *plan.args],
        "ranks": ranks,
        "store": {"port": 0},
    }
    modules = entry_modules(os.path.join(run_dir, "code"), spec.code.entry)
    pool_env = {**base, **{k: v for k, v in plan.extra_env.items() if not k.startswith("JT_")}}
    shaping = {k: pool_env[k] for k in _IMPORT_SHAPING if k in pool_env}
    env_id = json.dumps(
        [environment_id(spec), plan.extra_env, shaping], sort_keys=True, default=str
    )
    key = pool_key(plan.python, env_id, modules)
    try:
        run = start_ranks(plan.python, key, modules, pool_env, request, pools_home())
    except PoolUnavailable as exc:
        raise TargetError(str(exc)) from exc
    pgid = run.reply["pgid"]
    handle = {
        "pid": pgid,
        "pgid": pgid,
        "start_ticks": procs.start_ticks(pgid),
        "hot": {"used": True, "pool": run.reply["pool"], "warm": run.warm, "key": key},
    }
    return run, handle
