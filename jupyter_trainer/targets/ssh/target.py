"""The ssh target: nodes reached with the system OpenSSH client, one launcher per node
(torchrun) or one on node 0 that reaches the others over ssh itself (mpirun, horovodrun).

Each node gets one login for the whole run: the pre-flight's connection stays open and
carries the staging, the start and the follow session (nodes/session.py); a step whose
connection dropped is made as a call of its own.

Each node's run folder is a ``RemoteFolder`` of the node layer (nodes/folder.py), reached
through an ``SshClient``. A run goes through the hooks in this order, all inside the run's
supervisor (those from ``poll`` on are ``SshRunning``'s, in running.py):

- ``plan``: ``ssh -G`` per host (local), then on every node at once the agent's
  pre-flight (interpreter and version, imports, GPUs, tools, a free port on node 0, whether
  the snapshot is there). Any failure stops the run here, naming each node; nothing is
  launched.
- ``build_environment``: with ``--env``, the locked environment built (or found cached) on
  every node, and the imports checked with its python.
- ``stage``: missing snapshots are sent (content-addressed, so an unchanged one is not).
- ``start``: the run folder on every node (``<workdir>/runs/<id>``, ``code`` -> the
  snapshot), each launcher in its own session, then one follow session per node.
- ``poll``/``sync``: launcher states and new bytes of logs, events and rank records, from
  the follow sessions (rankside/agent/, nodes/mirror.py); a node unreachable for
  ``node_timeout`` seconds is lost, and the run fails naming it.
- ``stop``/``leftovers``: on each node, SIGTERM then SIGKILL of the launcher's group and of
  every process carrying ``JT_RUN_ID``, then what is still alive, the last bytes of its
  files and its ``outputs/``, all in one answer through the follow session (``finish``).
- ``collect``: every node's ``outputs/`` and ``logs/user/`` merged into the local ones.
- ``discard_workdirs``: each node's ``<run>/work/`` removed (the run ended well), asked
  through the follow session that ended the run; ``release`` closes the sessions.
"""

from __future__ import annotations

import posixpath
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...core.errors import TargetError
from ...core.spec import RunSpec
from ...launchers.table import Command, LaunchPlan, launcher
from ...nodes.commands import snapshot_dir_name
from ...nodes.folder import Node, RemoteFolder
from ...nodes.hotstart import remote as node_hot
from ...nodes.hotstart.bundle import node_bundle
from ...nodes.mirror import LocalFiles
from ...nodes.prepare import required_modules, snapshot_tarball
from ...nodes.session_relay import SessionRelay
from ...nodes.ssh import SshClient, control_dir, user_config_file
from ...nodes.stage_inputs import DATA_STAGED_ENV, NodeCache, rsync_shell, stage_inputs
from ...nodes.transport import NodeShell
from ...rankside.host.home import default_home
from ...rankside.rank import run_secrets
from ..base import BuiltEnvironment, Handle, checkpoint_blobs, refuse_ranks_beyond_gpus
from .commands import (
    HostConfig,
    NodeLaunch,
    SshConfig,
    launches_parts,
    launches_text,
    node_launches,
)
from .parallel import parallel, raise_any
from .prepare import hop_options, is_ip, node_address
from .running import SshRunning


class SshTarget(SshRunning):
    """Submit side, plan, environment, staging and launch; the run's following and its end
    are ``SshRunning``'s (running.py)."""

    kind = "ssh"  # nodes have their own filesystems: shares_filesystem stays False

    def __init__(self, name: str, config: dict[str, Any] | None = None) -> None:
        super().__init__(name, config)
        self.cfg = SshConfig.from_config(name, self.config)
        self._run_id = ""
        self._snapshot = ""
        self._nodes: list[Node] = []
        self._clients: dict[str, SshClient] = {}
        self._folders: list[RemoteFolder] = []  # one per node, node 0 first
        self._check: dict[str, Any] = {}  # the imports the environment must have
        self._started_at = 0.0
        self._staged: dict[str, Any] = {}
        self._launches: list[NodeLaunch] = []
        self._started: list[RemoteFolder] = []
        self._files: LocalFiles | None = None
        self._relay: SessionRelay | None = None
        self._last_pump = 0.0
        self._closed = False
        self._finished = False  # the first stop ended the run on the nodes
        self._left: dict[str, list[str]] = {}  # host -> what was alive after it
        self._fresh_leftovers = False
        self._seeded = False  # a resumed run's checkpoint went to node 0
        self._hot: tuple[RunSpec, LaunchPlan] | None = None  # a hot run: warm, then start

    def gpus_per_node(self) -> int:
        return self.cfg.gpus_per_node

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "hosts": [h.host for h in self.cfg.hosts],
            "workdir": self.cfg.workdir,
            "gpus_per_node": self.cfg.gpus_per_node,
        }

    # -- submit side -------------------------------------------------------------------
    def check(self, spec: RunSpec) -> None:
        refuse_ranks_beyond_gpus(self, spec.launch, "each node has (gpus_per_node)")
        launch = spec.launch
        if launch.nodes > len(self.cfg.hosts):
            raise TargetError(
                f"target {self.name!r} has {len(self.cfg.hosts)} host(s) and "
                f"--nodes is {launch.nodes}; add hosts or ask for fewer nodes"
            )
        self._check_processes(spec, "hosts")
        hosts = self.cfg.hosts[: launch.nodes]
        if launch.nodes > 1 and launcher(launch.launcher).placement == "first_node":
            for key in ("workdir", "python"):
                if len({getattr(h, key) or getattr(self.cfg, key) for h in hosts}) > 1:
                    raise TargetError(
                        f"--launcher {launch.launcher} starts every rank with node 0's paths, "
                        f"so the hosts of target {self.name!r} must share one {key}"
                    )
        if not shutil.which("ssh"):
            raise TargetError(
                "the ssh target needs the OpenSSH client on this machine: "
                "apt-get install openssh-client"
            )

    def _check_processes(self, spec: RunSpec, nodes: str) -> None:
        """What a target that starts the ranks directly on its ``nodes`` cannot run."""
        if spec.env.image:
            raise TargetError(
                f"target {self.name!r} starts processes directly on its {nodes} "
                f"and cannot run the container image {spec.env.image!r}"
            )
        if self.resolve_backend(spec.launch) == "nccl" and not self.cfg.gpus_per_node:
            raise TargetError(
                f"--backend nccl needs GPUs and target {self.name!r} sets no "
                "gpus_per_node; set it, or use --backend gloo"
            )

    # -- plan: resolve, pre-flight, stage ----------------------------------------------
    def _client(self, host: HostConfig) -> NodeShell:
        if host.host not in self._clients:
            self._clients[host.host] = SshClient(
                host.host,
                str(control_dir(default_home())),
                self.cfg.ssh_options,
                self.cfg.ssh_config or user_config_file(),
                self.cfg.connect_timeout,
                self.cfg.control_persist,
            )
        return self._clients[host.host]

    def _python(self, host: HostConfig, spec: RunSpec) -> str:
        return host.python or self.cfg.python or spec.env.python or sys.executable

    def plan(self, spec: RunSpec, run_id: str, run_dir: str, backend: str) -> LaunchPlan:
        return self._plan(spec, run_id, run_dir, backend, probe=False)

    def dry_plan(self, spec: RunSpec, run_id: str, run_dir: str, backend: str) -> LaunchPlan:
        """``plan`` with the pre-flight's questions asked of every node without installing
        the agent, making the workdir or looking at the snapshot's copy there: the same
        failures (a host that cannot be reached, a missing python, import, tool or GPU) stop
        the dry run, and nothing is left on the nodes."""
        self.cfg = replace(self.cfg, control_persist=0)  # no ControlMaster outlives it
        return self._plan(spec, run_id, run_dir, backend, probe=True)

    def _plan(
        self, spec: RunSpec, run_id: str, run_dir: str, backend: str, *, probe: bool
    ) -> LaunchPlan:
        launch = spec.launch
        self._run_id = run_id
        self._files = LocalFiles(run_dir)
        self._relay = SessionRelay(run_dir, run_id, launch.world_size)
        self._snapshot = snapshot_dir_name(spec.code.hash)
        hosts = list(self.cfg.hosts[: launch.nodes])
        started = time.monotonic()
        resolved = raise_any(
            parallel(lambda h: self._client(h).resolve(), hosts), "some hosts cannot be used"
        )
        names = sorted({o["hostname"][0] for o in resolved if not is_ip(o["hostname"][0])})
        self._started_at = started
        modules, versions = required_modules(spec, Path(run_dir) / "code")
        named = spec.env.name is not None  # the imports are checked in the environment
        self._folders = [
            RemoteFolder(
                self._client(h),
                self._python(h, spec),
                h.workdir or self.cfg.workdir,
                self._files,
                index=i,
                timeout=self.cfg.connect_timeout,
                lost_after=self.cfg.node_timeout,
                env_timeout=self.cfg.env_timeout,
                uv=self.cfg.uv,
            )
            for i, h in enumerate(hosts)
        ]

        def asked(folder: RemoteFolder) -> dict[str, Any]:
            return {
                "modules": [] if named else modules,
                "versions": [] if named else versions,
                "tools": launcher(launch.launcher).tools(launch, folder.index),
                "gpus": self.cfg.gpus_per_node > 0,
                "resolve": names if folder.index == 0 else [],
                "port": folder.index == 0,
            }

        if self.node_sessions and not probe:  # opened here, in the supervisor's main thread
            for folder in self._folders:
                folder.open_session(run_id, spec.code.hash, asked(folder))
        pre = parallel(
            (lambda f: f.probe(run_id, asked(f)))
            if probe
            else (lambda f: f.preflight(run_id, spec.code.hash, asked(f))),
            self._folders,
        )
        raise_any(pre, "pre-flight failed on some nodes")
        self._judge()
        self._check = {"modules": modules, "versions": versions}
        first_info = self._folders[0].info
        self._nodes = [
            Node(
                f.index,
                h.host,
                node_address(h, o, first_info["resolved"]),
                f.info["workdir"],
                f.python,
                hop_options(o),
            )
            for h, o, f in zip(hosts, resolved, self._folders)
        ]
        return self._nodes_plan(
            spec,
            run_id,
            backend,
            int(first_info["port"]),
            bool(first_info["root"]),
            min(f.info["cpus"] for f in self._folders),
        )

    def _nodes_plan(
        self, spec: RunSpec, run_id: str, backend: str, port: int, root: bool, cpus: float
    ) -> LaunchPlan:
        """The LaunchPlan on ``self._nodes``: node 0's interpreter, address and ``port``;
        ``root``: node 0 runs as root; ``cpus``: the fewest CPUs of a node."""
        first = self._nodes[0]
        remote = first.run_dir(run_id)
        return LaunchPlan(
            run_id=run_id,
            run_dir=remote,
            python=first.python,
            boot=f"{remote}/code/_jt/boot.py",
            entry=spec.code.entry,
            args=spec.code.args,
            backend=backend,
            backend_forced=spec.launch.backend is not None,
            master_addr=first.address,
            master_port=port,
            run_as_root=root,
            oversubscribe=spec.launch.procs > cpus,
            extra_env={**self.cfg.env, **({DATA_STAGED_ENV: "1"} if spec.data else {})},
        )

    def _judge(self) -> None:
        raise_any(
            [f.problem(self.cfg.gpus_per_node) for f in self._folders],
            "pre-flight failed on some nodes",
        )

    def build_environment(self, spec: RunSpec, plan: LaunchPlan) -> BuiltEnvironment | None:
        """Build the run's locked environment on every node (each keeps it cached under
        ``<workdir>/envs``) and check the imports with its python, which then runs the
        agent and the ranks there."""
        if spec.env.name is None:
            return None
        started = time.monotonic()
        answers = raise_any(
            parallel(lambda f: f.build_environment(spec.env, self._check), self._folders),
            f"environment {spec.env.name!r} could not be realised on some nodes",
        )
        nodes: dict[str, dict[str, Any]] = {}
        for folder, env in zip(self._folders, answers):
            nodes[folder.label] = {
                k: env.get(k) for k in ("python", "env_id", "built", "build_seconds", "built_at")
            }
            folder.python = env["python"]
        self._nodes = [replace(n, python=f.python) for n, f in zip(self._nodes, self._folders)]
        built = [h for h, e in nodes.items() if e["built"]]
        self._log(
            f"[jt] environment {spec.env.name!r} ready on {len(self._folders)} node(s) in "
            f"{time.monotonic() - started:.2f} s"
            + (f" (built on {', '.join(built)})" if built else " (cached)")
            + "\n"
        )
        self._judge()  # now with the environment's imports
        first, info = nodes[self._nodes[0].host], self._folders[0].info
        seconds = [
            e["build_seconds"]
            for e in nodes.values()
            if e["built"] and e.get("build_seconds") is not None
        ]
        return BuiltEnvironment(
            python=first["python"],
            env_id=first["env_id"],
            python_version=info["python"],
            torch=info["versions"].get("torch"),
            built=any(e["built"] for e in nodes.values()),
            build_seconds=max(seconds) if seconds else None,
            built_at=first.get("built_at"),
            nodes=nodes,
        )

    def stage(self, spec: RunSpec, plan: LaunchPlan, run_dir: str) -> None:
        self._log(
            f"[jt] pre-flight of {len(self._folders)} node(s) took "
            f"{time.monotonic() - self._started_at:.2f} s: "
            + "; ".join(
                f"{n.host} ({n.address}) python {f.info['python']}, torch "
                f"{f.info['versions'].get('torch')}"
                for n, f in zip(self._nodes, self._folders)
            )
        )
        self._stage(Path(run_dir) / "code")
        if spec.data:
            caches = [
                NodeCache(
                    f.shell,
                    posixpath.join(f.info["workdir"], "data"),
                    f.python,
                    rsync_shell(f.shell),
                )
                for f in self._folders
            ]
            self._staged["data"] = stage_inputs(
                caches, spec.data, default_home(), self.on_staging, self._log
            )["data"]

    def _stage(self, code: Path) -> None:
        """Send the snapshot to every node that lacks it."""
        missing = [f for f in self._folders if not f.has_snapshot]
        self._staged = {
            "snapshot": self._snapshot,
            "sent_to": [f.label for f in missing],
            "already_on": [f.label for f in self._folders if f not in missing],
        }
        for folder in self._folders:
            if folder.set_aside:
                self._staged.setdefault("changed_copies_set_aside", {})[folder.label] = (
                    folder.set_aside
                )
                self._log(
                    f"[jt] {folder.label}: the node's copy of snapshot {self._snapshot} "
                    f"had been changed by a run; moved to {folder.set_aside} and "
                    "staged again\n"
                )
        if not missing:
            return
        started = time.monotonic()
        payload = snapshot_tarball(code)
        raise_any(parallel(lambda f: f.stage(payload), missing), "the snapshot could not be sent")
        self._staged.update(bytes=len(payload), seconds=round(time.monotonic() - started, 3))
        self._log(
            f"[jt] snapshot {self._snapshot} ({len(payload)} bytes) sent to "
            f"{', '.join(f.label for f in missing)} in {self._staged['seconds']} s\n"
        )

    # -- launch ------------------------------------------------------------------------
    def command(self, spec: RunSpec, plan: LaunchPlan) -> Command:
        real_ssh = (self._folders[0].info["tools"].get("ssh") if self._folders else None) or "ssh"
        self._launches = node_launches(
            spec.launch,
            plan,
            self._nodes,
            real_ssh=real_ssh,
            network_interfaces=self.cfg.network_interfaces,
        )
        self._hot = (spec, plan) if spec.launch.hot else None
        return self._launches[0].command or Command(())

    def dry_run(self, spec: RunSpec, plan: LaunchPlan, command: Command) -> str:
        """Each node's command, as shell lines run in its run folder there, with the files
        the run writes beside it (the hop config of mpirun and horovodrun)."""
        return launches_text(self._launches, spec.launch.launcher)

    def dry_run_parts(self, spec: RunSpec, plan: LaunchPlan, command: Command) -> dict[str, Any]:
        return {
            "nodes": launches_parts(self._launches),
            "notes": [
                f"the run's snapshot {self._snapshot} is sent to "
                "each node that lacks it when the run starts"
            ],
        }

    def start(self, command: Command, run_dir: str, log_path: str) -> Handle:
        self._started = list(self._folders)
        spec_json = (Path(run_dir) / "spec.json").read_text()  # the ranks read params there
        secrets = run_secrets.files(run_dir)  # and the secret ones there, mode 0600

        seed = {} if self._seeded else checkpoint_blobs(run_dir)
        self._seeded = True

        def start_one(item: NodeLaunch) -> dict[str, Any]:
            payload = item.payload(self._snapshot, self.cfg.orphan_timeout)
            payload["files"].update({"spec.json": spec_json, **secrets})
            if item.node.index == 0 and seed:
                payload["blobs"] = seed
            return self._folders[item.node.index].start(payload, "starting the launcher")

        hot_run, self._hot = self._hot, None
        hot = self._warm_pools(hot_run, run_dir, spec_json) if hot_run is not None else None
        # Nodes without a launcher first: mpirun's ranks need their run folder to exist.
        order = sorted(self._launches, key=lambda item: item.command is not None)
        prepared = parallel(start_one, [i for i in order if i.command is None])
        launched = parallel(start_one, [i for i in order if i.command is not None])
        started: list[dict[str, Any]] = raise_any(
            [*prepared, *launched], "the run could not start on every node"
        )
        answers = {item.node.index: a for item, a in zip(order, started)}
        for folder in self._folders:
            folder.follow()
        nodes = []
        for item in self._launches:
            a = answers[item.node.index]
            ids: dict[str, Any] = {
                k: a[k] for k in ("pid", "pgid", "start_ticks", "keeper") if k in a
            }
            nodes.append(
                {
                    "host": item.node.host,
                    "address": item.node.address,
                    "run_dir": item.run_dir,
                    "launcher": item.command is not None,
                    **ids,
                }
            )
        return {
            "target": self.name,
            "kind": self.kind,
            "hosts": [n.host for n in self._nodes],
            **({"hot": hot} if hot is not None else {}),
            "nodes": nodes,
            "run_dir_remote": self._nodes[0].run_dir(self._run_id),
            "staging": self._staged,
            "preflight": {
                f.label: {k: f.info.get(k) for k in ("hostname", "python", "versions", "gpus")}
                for f in self._folders
            },
        }

    def _warm_pools(
        self, hot_run: tuple[RunSpec, LaunchPlan], run_dir: str, spec_json: str
    ) -> dict[str, Any]:
        """Ready every node's rank pool; with all of them up, the nodes' launchers become the
        pool's (node_hot.py). The record for ``state["launcher"]["hot"]``."""
        spec, plan = hot_run
        items = [i for i in self._launches if i.command is not None]
        bundle = node_bundle()[0]
        args = [
            node_hot.launch_args(spec, plan, i, str(Path(run_dir) / "code"), bundle) for i in items
        ]

        def warm(pair: tuple[NodeLaunch, dict[str, Any]]) -> dict[str, Any]:
            payload = node_hot.warm_payload(
                pair[0], pair[1], self._snapshot, self.cfg.orphan_timeout
            )
            payload["files"].update({"spec.json": spec_json, **run_secrets.files(run_dir)})
            return self._folders[pair[0].node.index].start(
                payload, "readying the rank pool", timeout=node_hot.WARM_TIMEOUT_S
            )

        started = time.monotonic()
        answers = parallel(warm, list(zip(items, args)))
        record = node_hot.verdict([i.node.host for i in items], answers)
        if record["used"]:
            hot = {i.node.index: node_hot.hot_launch(i, a) for i, a in zip(items, args)}
            self._launches = [hot.get(i.node.index, i) for i in self._launches]
        self._log(
            f"[jt] rank pools on {len(items)} node(s) "
            + (
                f"ready in {time.monotonic() - started:.2f} s ("
                + ("warm" if record["warm"] else "started")
                + ")\n"
                if record["used"]
                else f"not used, starting torchrun: {record['why']}\n"
            )
        )
        return record
