"""A ``kind = "ray"`` entry of targets.toml, validated (``RayConfig``), and the names the
ray target's modules share (its Ray namespace, the form of a cluster's address)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...core.errors import TargetError
from ..ssh.commands import SshConfig

NAMESPACE = "jupyter_trainer"
DEFAULT_WORKDIR = "~/jupyter_trainer_ray"
RAY_KEYS = ("address", "runtime_env", "autoscaling", "shell_persist")
SHARED_KEYS = (
    "workdir",
    "python",
    "gpus_per_node",
    "env",
    "connect_timeout",
    "node_timeout",
    "orphan_timeout",
    "uv",
    "env_timeout",
)
ADDRESS = re.compile(
    r"auto|(ray://)?(?P<host>[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\])"
    r":(?P<port>\d{1,5})"
)


@dataclass(frozen=True)
class RayConfig:
    """A ``kind = "ray"`` entry of targets.toml, validated. The settings a Ray target shares
    with an ssh one (workdir, python, env, timeouts, uv) mean the same there."""

    address: str
    runtime_env: Mapping[str, Any] = field(default_factory=dict)
    autoscaling: bool = False  # True: the cluster may grow, so a run waits for nodes
    nodes: SshConfig = field(default_factory=lambda: SshConfig(hosts=()))
    # Seconds a node's shell (the actor that runs the agent) outlives its last run, for the
    # next run to reuse (ssh's ControlPersist, for Ray); 0: one shell per run, ended with it.
    shell_persist: int = 300

    @classmethod
    def from_config(cls, name: str, config: Mapping[str, Any]) -> RayConfig:
        unknown = sorted(set(config) - set(RAY_KEYS) - set(SHARED_KEYS))
        if unknown:
            raise TargetError(
                f"target {name!r}: unknown key(s) {unknown}; a ray target takes "
                f"{', '.join(sorted(RAY_KEYS + SHARED_KEYS))}"
            )
        address = config.get("address")
        if not isinstance(address, str) or not ADDRESS.fullmatch(address):
            raise TargetError(
                f"target {name!r}: address must be auto, ray://HOST:PORT or "
                f"HOST:PORT (the head's GCS), got {address!r}"
            )
        runtime_env = config.get("runtime_env", {})
        if not isinstance(runtime_env, dict) or not all(isinstance(k, str) for k in runtime_env):
            raise TargetError(
                f"target {name!r}: runtime_env must be a table, e.g. "
                'runtime_env = { env_vars = { NCCL_DEBUG = "INFO" } }'
            )
        env_vars = runtime_env.get("env_vars", {})
        if not isinstance(env_vars, dict):
            raise TargetError(
                f'target {name!r}: runtime_env.env_vars must be a table of NAME = "value"'
            )
        autoscaling = config.get("autoscaling", False)
        if not isinstance(autoscaling, bool):
            raise TargetError(
                f"target {name!r}: autoscaling must be true or false, got {autoscaling!r}"
            )
        persist = config.get("shell_persist", 300)
        if isinstance(persist, bool) or not isinstance(persist, int) or persist < 0:
            raise TargetError(
                f"target {name!r}: shell_persist must be a number of seconds "
                f"(0 or more), got {persist!r}"
            )
        shared = {k: config[k] for k in SHARED_KEYS if k in config}
        shared.setdefault("workdir", DEFAULT_WORKDIR)
        shared.setdefault("connect_timeout", 30)
        nodes = SshConfig.from_config(name, {"hosts": ["ray"], **shared})
        return cls(address, dict(runtime_env), autoscaling, nodes, persist)
