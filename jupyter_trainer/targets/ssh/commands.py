"""The ssh target's configuration and everything it sends to its nodes, as pure functions.

Nothing here runs a process or reads a node, so every generated command is golden-tested
with hostile paths and values. Three rules keep user values away from any shell:

- a remote command is an argv list joined with ``shlex.join`` (the node's login shell
  splits it back into exactly that list, whatever quotes, ``$()`` or newlines it holds);
- the launcher's environment and argv travel as JSON on the command's standard input, never
  on its command line (where a shell, or ``ps``, would see them);
- files written on a node (the ssh wrapper for hops between nodes, its config) quote every
  value, and refuse the few characters their format cannot carry.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ...core.errors import TargetError
from ...core.spec import LaunchSpec
from ...launchers.table import LaunchPlan, Topology, launcher, rank_env, shell_text
from ...nodes.folder import Node, NodeLaunch

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SSH_OPTION = re.compile(r"[A-Za-z][A-Za-z0-9]*")
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_./+-]+")
# Options of the user's ssh config that a hop from node 0 to another node needs as well.
HOP_OPTIONS = (
    "port",
    "user",
    "identityfile",
    "identitiesonly",
    "stricthostkeychecking",
    "userknownhostsfile",
    "certificatefile",
    "pubkeyauthentication",
)
DEFAULT_WORKDIR = "~/jupyter_trainer"


def seconds(name: str, key: str, value: Any, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise TargetError(
            f"target {name!r}: {key} must be a whole number of seconds from "
            f"{low} to {high}, got {value!r}"
        )
    return value


def single_line(name: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value or any(c in value for c in "\0\n\r"):
        raise TargetError(
            f"target {name!r}: {key} must be a non-empty single-line string, got {value!r}"
        )
    return value


def destination(name: str, value: Any) -> str:
    host = single_line(name, "a host", value)
    if host.startswith("-") or any(c.isspace() for c in host):
        raise TargetError(
            f"target {name!r}: host {host!r} is not an ssh destination (no "
            "spaces, must not start with '-'); write an alias of ~/.ssh/config, "
            "a host name or user@host"
        )
    return host


@dataclass(frozen=True)
class HostConfig:
    """One node as configured: an ssh destination, and what may differ from node to node."""

    host: str
    workdir: str | None = None  # None: the target's workdir
    python: str | None = None  # None: the target's python
    address: str | None = None  # how the other nodes reach it; None: resolved


@dataclass(frozen=True)
class SshConfig:
    """A ``kind = "ssh"`` entry of targets.toml, validated."""

    hosts: tuple[HostConfig, ...]
    workdir: str = DEFAULT_WORKDIR
    python: str | None = None
    gpus_per_node: int = 0
    env: Mapping[str, str] = field(default_factory=dict)
    ssh_options: tuple[tuple[str, str], ...] = ()
    ssh_config: str | None = None  # an ssh config file for ``ssh -F``
    connect_timeout: int = 10
    node_timeout: int = 30  # how long a node may stay unreachable mid-run
    orphan_timeout: int = 300  # a node ends a run nobody has followed this long
    control_persist: int = 120
    network_interfaces: tuple[str, ...] = ()
    uv: str | None = None  # uv on the nodes, for --env; None: build.py finds it
    env_timeout: int = 1800  # how long building an environment on a node may take

    @classmethod
    def from_config(cls, name: str, config: Mapping[str, Any]) -> SshConfig:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(config) - known)
        if unknown:
            raise TargetError(
                f"target {name!r}: unknown key(s) {unknown}; an ssh target takes "
                f"{', '.join(sorted(known))}"
            )
        data = dict(config)
        data["hosts"] = _hosts(name, config.get("hosts"))
        for key in ("workdir", "python", "ssh_config", "uv"):
            if data.get(key) is not None:
                data[key] = single_line(name, key, data[key])
        gpus = data.get("gpus_per_node", 0)
        if type(gpus) is not int or gpus < 0:
            raise TargetError(
                f"target {name!r}: gpus_per_node must be a whole number, got {gpus!r}"
            )
        for key, low, high in (
            ("connect_timeout", 1, 300),
            ("node_timeout", 1, 3600),
            ("orphan_timeout", 10, 86400),
            ("control_persist", 0, 86400),
            ("env_timeout", 10, 86400),
        ):
            if key in data:
                data[key] = seconds(name, key, data[key], low, high)
        env = data.get("env", {})
        if not isinstance(env, dict) or not all(_ENV_NAME.fullmatch(str(k)) for k in env):
            raise TargetError(
                f'target {name!r}: env must be a table of NAME = "value" with '
                "NAME a valid variable name"
            )
        data["env"] = {str(k): str(v) for k, v in env.items()}
        data["ssh_options"] = ssh_options(name, data.get("ssh_options", ()))
        nics = data.get("network_interfaces", ())
        nics = [nics] if isinstance(nics, str) else nics
        if not isinstance(nics, (list, tuple)) or not all(
            isinstance(n, str) and re.fullmatch(r"[A-Za-z0-9_.:@-]+", n) for n in nics
        ):
            raise TargetError(f"target {name!r}: network_interfaces must be interface names")
        data["network_interfaces"] = tuple(nics)
        return cls(**data)


def _hosts(name: str, value: Any) -> tuple[HostConfig, ...]:
    if not isinstance(value, (list, tuple)) or not value:
        raise TargetError(
            f"target {name!r}: hosts must be a non-empty list of ssh "
            'destinations, e.g. hosts = ["gpu1", "gpu2"]'
        )
    hosts = []
    for item in value:
        if isinstance(item, dict):
            extra = sorted(set(item) - {"host", "workdir", "python", "address"})
            if extra or "host" not in item:
                raise TargetError(
                    f"target {name!r}: a host table takes host (required), "
                    f"workdir, python and address; got {sorted(item)}"
                )
            hosts.append(
                HostConfig(
                    destination(name, item["host"]),
                    *(
                        single_line(name, k, item[k]) if item.get(k) is not None else None
                        for k in ("workdir", "python", "address")
                    ),
                )
            )
        else:
            hosts.append(HostConfig(destination(name, item)))
    if len({h.host for h in hosts}) != len(hosts):
        raise TargetError(f"target {name!r}: a host is listed twice in hosts")
    return tuple(hosts)


def ssh_options(name: str, value: Any) -> tuple[tuple[str, str], ...]:
    """``{Port = 2222}`` or ``["Port=2222"]`` -> (("Port", "2222"),)."""
    if isinstance(value, dict):
        items = [
            (str(k), str(v).lower() if isinstance(v, bool) else str(v)) for k, v in value.items()
        ]
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) and "=" in v for v in value):
        items = [tuple(v.split("=", 1)) for v in value]
    else:
        raise TargetError(
            f"target {name!r}: ssh_options must be a table such as "
            '{ Port = 2222 } or a list such as ["Port=2222"]'
        )
    for key, val in items:
        if not _SSH_OPTION.fullmatch(key) or not val or any(c in val for c in '\0\n\r"\\'):
            raise TargetError(f"target {name!r}: ssh option {key}={val!r} is not valid")
    return tuple((k.strip(), v.strip()) for k, v in items)


# -- the launch, node by node ------------------------------------------------------------
def hop_config(nodes: Sequence[Node]) -> str:
    """An ssh config for hops between nodes (mpirun, horovodrun): one block per address.

    Carries what ``ssh -G`` resolved for each node on this machine (port, user, keys, host
    key checking) so that ``-H address:slots`` reaches the same sshd the target reaches."""
    lines = ["# written by jupyter_trainer: ssh from one node of the run to another"]
    for node in nodes:
        lines.append(f"Host {_config_value(node.address)}")
        for key in HOP_OPTIONS:
            for value in node.hop.get(key, ()):
                lines.append(f"  {key} {_config_value(value)}")
    lines += ["Host *", "  BatchMode yes", "  LogLevel ERROR"]
    return "\n".join(lines) + "\n"


def _config_value(value: str) -> str:
    """A value as ``ssh -G`` printed it (config syntax: ``%`` tokens and ``~`` are kept, to
    be expanded by ssh on the node), quoted when it has spaces."""
    if any(c in value for c in '"\\\0\n\r'):
        raise TargetError(
            f"{value!r} cannot be written into an ssh config (quotes, "
            "backslashes and line breaks cannot be escaped there)"
        )
    return f'"{value}"' if not value or any(c.isspace() for c in value) else value


def hop_wrapper(real_ssh: str, config_path: str) -> str:
    """``bin/ssh`` on a node: the real ssh with the run's hop config.

    It is found first on the launcher's PATH, so mpirun (``plm_rsh_agent=ssh``) and
    horovodrun (which runs a bare ``ssh``) both use it; PATH, unlike Open MPI's agent
    setting, works for paths with spaces. The target's own ``ssh_options`` are not repeated:
    those a hop needs are already in what ``ssh -G`` resolved, and others (a ProxyJump to
    reach the cluster) would be wrong between two of its nodes."""
    return "#!/bin/sh\n" + "exec " + shlex.join([real_ssh, "-F", config_path]) + ' "$@"\n'


def orted_wrapper(run_id: str) -> str:
    """``bin/orted`` on a node: Open MPI's daemon, marked with the run's ``JT_RUN_ID``.

    mpirun starts it on the other nodes over ssh (``orte_launch_agent``), where nothing of
    the launcher's environment reaches it; marked, a node's leftover scan finds it too."""
    return (
        "#!/bin/sh\n" + f"JT_RUN_ID={shlex.quote(run_id)}\nexport JT_RUN_ID\n" + 'exec orted "$@"\n'
    )


def node_launches(
    launch: LaunchSpec,
    plan: LaunchPlan,
    nodes: Sequence[Node],
    *,
    real_ssh: str = "ssh",
    network_interfaces: Sequence[str] = (),
) -> list[NodeLaunch]:
    """Per node: the launcher command and files, for ``launch`` on ``nodes`` (node 0 first).

    A launcher placed on every node (torchrun: c10d rendezvous at node 0's address) starts
    once per node; one placed on the first node (mpirun, horovodrun) starts on node 0 only
    and reaches the other nodes over ssh through ``bin/ssh``."""
    if len(nodes) != launch.nodes:
        raise TargetError(f"{launch.nodes} node(s) asked, {len(nodes)} resolved")
    entry = launcher(launch.launcher)
    multi = launch.nodes > 1
    files: dict[str, str] = {}
    mpi_env: dict[str, str] = {}
    if multi and entry.placement == "first_node":
        first = nodes[0].run_dir(plan.run_id)
        files = {
            "ssh_config": hop_config(nodes),
            "bin/ssh": hop_wrapper(real_ssh, f"{first}/ssh_config"),
        }
        mpi_env = {"OMPI_MCA_plm_rsh_agent": "ssh", "OMPI_MCA_plm_rsh_no_tree_spawn": "1"}
        # mpirun pastes the launch agent unquoted into the remote shell command, so only a
        # plain path is given; otherwise node 1's daemons stay unmarked (the ranks are).
        if _PLAIN_PATH.fullmatch(f"{first}/bin/orted"):
            files["bin/orted"] = orted_wrapper(plan.run_id)
            mpi_env["OMPI_MCA_orte_launch_agent"] = f"{first}/bin/orted"
    out = []
    for node in nodes:
        run_dir = node.run_dir(plan.run_id)
        if entry.placement != "every_node" and node.index != 0:
            out.append(NodeLaunch(node, run_dir, None, files=files))
            continue
        node_plan = replace(
            plan, run_dir=run_dir, python=node.python, boot=f"{run_dir}/code/_jt/boot.py"
        )
        env = {**plan.extra_env, **rank_env(node_plan, launch.launcher), **mpi_env}
        if entry.placement == "every_node":
            env.update(JT_NODE_RANK=str(node.index), JT_NODE=node.host)
        topology = Topology(
            node_rank=node.index if multi else None,
            address=node.address if multi else None,
            hosts=tuple(n.address for n in nodes),
            interfaces=network_interfaces,
            launcher_cache=False,
        )
        path = (f"{run_dir}/bin",) if mpi_env else ()
        out.append(
            NodeLaunch(node, run_dir, entry.command(launch, node_plan, topology, env), path, files)
        )
    return out


def render_launches(launches: Sequence[NodeLaunch], snapshot: str) -> str:
    """A stable text form of every node's launch, for golden files."""
    chunks = []
    for item in launches:
        payload = item.payload(snapshot, 300)
        chunks.append(
            f"== node {item.node.index} ({item.node.host}, {item.node.address})\n"
            + json.dumps(payload, indent=1, sort_keys=True)
            + "\n"
        )
    return "".join(chunks)


def launches_text(launches: Sequence[NodeLaunch], launcher_name: str) -> str:
    """Each node's command as a dry run prints it: shell lines run in its run folder there,
    with the files the run writes beside it (the hop config of mpirun and horovodrun)."""
    chunks = []
    for item in launches:
        node = item.node
        chunks.append(f"# node {node.index}: {node.host} ({node.address}), python {node.python}\n")
        for rel, text in sorted(item.files.items()):
            chunks.append(
                f"# file {item.run_dir}/{rel}:\n"
                + "".join(f"#   {line}\n" for line in text.splitlines())
            )
        if item.command is None:
            chunks.append(
                f"# no launcher here: node 0's {launcher_name} starts this node's ranks over ssh\n"
            )
            continue
        if item.path_prepend:
            chunks.append(
                "export PATH=" + ":".join(shlex.quote(p) for p in item.path_prepend) + ':"$PATH"\n'
            )
        chunks.append(shell_text(item.command, cwd=item.run_dir))
    return "".join(chunks)


def launches_parts(launches: Sequence[NodeLaunch]) -> list[dict[str, Any]]:
    """Each node's launch as the fields of a dry run's ``nodes``."""
    return [
        {
            "index": i.node.index,
            "host": i.node.host,
            "address": i.node.address,
            "run_dir": i.run_dir,
            "python": i.node.python,
            "argv": list(i.command.argv) if i.command else None,
            "env": dict(i.command.env) if i.command else {},
            "env_defaults": dict(i.command.env_defaults) if i.command else {},
            "files": dict(i.files),
        }
        for i in launches
    ]
