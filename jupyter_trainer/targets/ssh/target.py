"""The ssh target: nodes reached with the system OpenSSH client, one launcher per node
(torchrun) or one on node 0 that reaches the others over ssh itself (mpirun, horovodrun).

Each node's run folder is a ``RemoteFolder`` of the node layer (nodes/folder.py), reached
through an ``SshClient``. A run goes through the hooks in this order, all inside the run's
supervisor:

Each node gets one login for the whole run: the pre-flight's connection stays open and
carries the staging, the start and the follow session (nodes/session.py); a step whose
connection dropped is made as a call of its own.

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
  the follow sessions (rankside/agent.py, nodes/mirror.py); a node unreachable for ``node_timeout``
  seconds is lost, and the run fails naming it.
- ``stop``/``leftovers``: on each node, SIGTERM then SIGKILL of the launcher's group and of
  every process carrying ``JT_RUN_ID``, then what is still alive, the last bytes of its
  files and its ``outputs/``, all in one answer through the follow session (``finish``).
- ``collect``: every node's ``outputs/`` and ``logs/user/`` merged into the local ones.
- ``discard_workdirs``: each node's ``<run>/work/`` removed (the run ended well), asked
  through the follow session that ended the run; ``release`` closes the sessions.
"""

from __future__ import annotations

import posixpath
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from ...core.errors import TargetError, TrainerError
from ...core.spec import RunSpec
from ...launchers.table import Command, LaunchPlan, launcher, shell_text
from ...nodes.commands import snapshot_dir_name
from ...nodes.folder import Node, RemoteFolder
from ...nodes.hotstart import remote as node_hot
from ...nodes.hotstart.bundle import node_bundle
from ...nodes.mirror import LocalFiles
from ...nodes.prepare import required_modules, snapshot_tarball
from ...nodes.ssh import SshClient, control_dir, user_config_file
from ...nodes.stage_inputs import DATA_STAGED_ENV, NodeCache, rsync_shell, stage_inputs
from ...rankside import procs
from ...rankside.home import default_home
from ..base import BuiltEnvironment, Handle, Target, checkpoint_blobs
from .commands import HostConfig, NodeLaunch, SshConfig, node_launches
from .prepare import hop_options, is_ip, node_address

T = TypeVar("T")
PUMP_S = 0.05  # as often as the supervisor syncs


def _parallel(fn: Callable[[Any], T], items: Sequence[Any]) -> list[T | TrainerError]:
    """``fn`` on every item at once (one ssh call per node); errors are returned, not raised,
    so one message can name every node that failed."""

    def call(item: Any) -> T | TrainerError:
        try:
            return fn(item)
        except TrainerError as exc:
            return exc

    if len(items) <= 1:
        return [call(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(16, len(items))) as pool:
        return list(pool.map(call, items))


def _raise_any(results: Sequence[Any], what: str) -> None:
    errors = [str(r) for r in results if isinstance(r, TrainerError)]
    if errors:
        raise TargetError(
            f"{what}; nothing was launched:\n  " + "\n  ".join(errors)
            if len(errors) > 1
            else f"{errors[0]}; nothing was launched"
        )


class SshTarget(Target):
    kind = "ssh"  # nodes have their own filesystems: shares_filesystem stays False
    # One connection per node from the pre-flight to the follow (nodes/session.py); False
    # where the transport has no long-lived sessions of that kind.
    node_sessions: ClassVar[bool] = True

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
    def _client(self, host: HostConfig) -> SshClient:
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
        self._snapshot = snapshot_dir_name(spec.code.hash)
        hosts = list(self.cfg.hosts[: launch.nodes])
        started = time.monotonic()
        resolved = _parallel(lambda h: self._client(h).resolve(), hosts)
        _raise_any(resolved, "some hosts cannot be used")
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
        pre = _parallel(
            (lambda f: f.probe(run_id, asked(f)))
            if probe
            else (lambda f: f.preflight(run_id, spec.code.hash, asked(f))),
            self._folders,
        )
        _raise_any(pre, "pre-flight failed on some nodes")
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
        _raise_any(
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
        answers = _parallel(lambda f: f.build_environment(spec.env, self._check), self._folders)
        _raise_any(answers, f"environment {spec.env.name!r} could not be realised on some nodes")
        nodes: dict[str, dict[str, Any]] = {}
        for folder, env in zip(self._folders, answers):
            nodes[folder.label] = {
                k: env.get(k) for k in ("python", "env_id", "built", "build_seconds", "built_at")
            }  # type: ignore[union-attr]
            folder.python = env["python"]  # type: ignore[index]
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
        _raise_any(_parallel(lambda f: f.stage(payload), missing), "the snapshot could not be sent")
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
        chunks = []
        for item in self._launches:
            node = item.node
            chunks.append(
                f"# node {node.index}: {node.host} ({node.address}), python {node.python}\n"
            )
            for rel, text in sorted(item.files.items()):
                chunks.append(
                    f"# file {item.run_dir}/{rel}:\n"
                    + "".join(f"#   {line}\n" for line in text.splitlines())
                )
            if item.command is None:
                chunks.append(
                    f"# no launcher here: node 0's {spec.launch.launcher} starts "
                    "this node's ranks over ssh\n"
                )
                continue
            if item.path_prepend:
                chunks.append(
                    "export PATH="
                    + ":".join(shlex.quote(p) for p in item.path_prepend)
                    + ':"$PATH"\n'
                )
            chunks.append(shell_text(item.command, cwd=item.run_dir))
        return "".join(chunks)

    def dry_run_parts(self, spec: RunSpec, plan: LaunchPlan, command: Command) -> dict[str, Any]:
        nodes = [
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
            for i in self._launches
        ]
        return {
            "nodes": nodes,
            "notes": [
                f"the run's snapshot {self._snapshot} is sent to "
                "each node that lacks it when the run starts"
            ],
        }

    def start(self, command: Command, run_dir: str, log_path: str) -> Handle:
        self._started = list(self._folders)
        spec_json = (Path(run_dir) / "spec.json").read_text()  # the ranks read params there

        seed = {} if self._seeded else checkpoint_blobs(run_dir)
        self._seeded = True

        def start_one(item: NodeLaunch) -> dict[str, Any]:
            payload = item.payload(self._snapshot, self.cfg.orphan_timeout)
            payload["files"]["spec.json"] = spec_json
            if item.node.index == 0 and seed:
                payload["blobs"] = seed
            return self._folders[item.node.index].start(payload, "starting the launcher")

        hot = self._warm_pools(run_dir, spec_json) if self._hot is not None else None
        # Nodes without a launcher first: mpirun's ranks need their run folder to exist.
        order = sorted(self._launches, key=lambda item: item.command is not None)
        prepared = _parallel(start_one, [i for i in order if i.command is None])
        launched = _parallel(start_one, [i for i in order if i.command is not None])
        _raise_any([*prepared, *launched], "the run could not start on every node")
        answers = {item.node.index: a for item, a in zip(order, [*prepared, *launched])}
        for folder in self._folders:
            folder.follow()
        nodes = []
        for item in self._launches:
            a = answers[item.node.index]
            nodes.append(
                {
                    "host": item.node.host,
                    "address": item.node.address,
                    "run_dir": item.run_dir,
                    "launcher": item.command is not None,
                    **{k: a[k] for k in ("pid", "pgid", "start_ticks", "keeper") if k in a},
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

    def _warm_pools(self, run_dir: str, spec_json: str) -> dict[str, Any]:
        """Ready every node's rank pool; with all of them up, the nodes' launchers become the
        pool's (node_hot.py). The record for ``state["launcher"]["hot"]``."""
        spec, plan = self._hot  # type: ignore[misc]
        self._hot = None
        items = [i for i in self._launches if i.command is not None]
        bundle = node_bundle()[0]
        args = [
            node_hot.launch_args(spec, plan, i, str(Path(run_dir) / "code"), bundle) for i in items
        ]

        def warm(pair: tuple[NodeLaunch, dict[str, Any]]) -> dict[str, Any]:
            payload = node_hot.warm_payload(
                pair[0], pair[1], self._snapshot, self.cfg.orphan_timeout
            )
            payload["files"]["spec.json"] = spec_json
            return self._folders[pair[0].node.index].start(
                payload, "readying the rank pool", timeout=node_hot.WARM_TIMEOUT_S
            )

        started = time.monotonic()
        answers = _parallel(warm, list(zip(items, args)))
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

    # -- while it runs -----------------------------------------------------------------
    def _pump(self, force: bool = False) -> None:
        now = time.monotonic()
        if self._closed or (not force and now - self._last_pump < PUMP_S):
            return
        self._last_pump = now
        for folder in self._folders:
            folder.pump()

    def sync(self, handle: Handle) -> None:
        self._pump()

    def _exit_code(self) -> int | None:
        codes = [
            (f.follower.status if f.follower else {}).get("exit")
            for f, item in zip(self._folders, self._launches)
            if item.command is not None
        ]
        failed = [c for c in codes if c not in (None, 0)]
        if failed:
            return failed[0]
        return 0 if codes and all(c == 0 for c in codes) else None

    def poll(self, handle: Handle) -> int | None:
        if self._closed:
            return self._exit_code()
        self._pump()
        code = self._exit_code()
        for folder, node in zip(self._folders, self._nodes):
            follower = folder.follower
            down = follower.lost_for() if follower else 0.0
            if down > self.cfg.node_timeout or (down and code not in (None, 0)):
                raise TargetError(
                    f"node {folder.label} ({node.address}) was lost: "
                    f"unreachable for {down:.0f} s ({follower.error})"
                )
        return code

    # -- teardown ----------------------------------------------------------------------
    def stop(self, handle: Handle, run_id: str, grace: float) -> dict[str, Any]:
        """The first stop also takes each node's last files, leftovers and outputs in the
        same answer (``finish``), asked through the node's follow session when it is up, so
        ending a run costs no new connection; a node without one gets a call of its own."""
        first = not self._finished

        def args_for(folder: RemoteFolder) -> dict[str, Any]:
            return _end_args(handle, folder, run_id, grace)

        answers: dict[str, tuple[dict[str, Any], bytes] | TrainerError] = {}
        if first:
            self._finished = True
            asked = [f for f in self._started if f.request_finish(args_for(f))]
            for folder in asked:
                got = folder.await_finish(self.cfg.connect_timeout + grace + 30)
                if got is not None:
                    answers[folder.label] = got
        for folder in self._folders:  # those that answered keep theirs for discard_workdirs
            if folder.label not in answers:
                folder.stop_following()
        self._closed = True

        def call(folder: RemoteFolder) -> tuple[dict[str, Any], bytes]:
            return folder.end(
                args_for(folder),
                self.cfg.connect_timeout + grace + (600 if first else 20),
                finish=first,
            )

        rest = [f for f in self._started if f.label not in answers]
        for folder, result in zip(rest, _parallel(call, rest)):
            answers[folder.label] = result
        report: dict[str, Any] = {}
        for folder in self._started:
            result = answers[folder.label]
            if isinstance(result, TrainerError):
                report[folder.label] = {"error": str(result)}
                continue
            answer, _ = result
            report[folder.label] = {
                "sigterm": answer.get("sigterm"),
                "sigkilled": answer.get("sigkilled", []),
            }
            if first:
                self._left[folder.label] = answer.get("leftovers", [])
        self._fresh_leftovers = first
        return {
            "nodes": report,
            "sigkilled": [f"{h}: {p}" for h, r in report.items() for p in r.get("sigkilled", [])],
        }

    def end_attempt(self, handle: Handle, run_id: str, grace: float) -> dict[str, Any]:
        """Stop each node's launcher and ranks with a call of its own; the follow sessions
        end too, and ``start`` opens new ones for the next attempt."""
        self._pump(force=True)
        for folder in self._started:
            folder.stop_following()
            folder.follower = None  # the next start follows the next attempt afresh
        ended = _parallel(
            lambda f: f.end(
                _end_args(handle, f, run_id, grace),
                self.cfg.connect_timeout + grace + 20,
                finish=False,
            ),
            self._started,
        )
        failed = [
            f"{f.label}: {a}" for f, a in zip(self._started, ended) if isinstance(a, TrainerError)
        ]
        if failed:
            raise TargetError(
                "the attempt's processes could not be stopped on every node: " + "; ".join(failed)
            )
        return {
            "nodes": {
                f.label: {"sigkilled": a[0].get("sigkilled", [])}
                for f, a in zip(self._started, ended)
            }
        }

    def stacks(self, handle: Handle | None, ranks: dict[int, dict[str, Any]]) -> dict[int, str]:
        """Each rank's stack by ``py-spy dump`` on its node (the node whose pre-flight found
        the hostname the rank recorded), over that node's ssh connection."""
        by_name: dict[Any, str] = {}
        for label, facts in ((handle or {}).get("preflight") or {}).items():
            by_name.setdefault(facts.get("hostname"), label)
        hosts = {h.host: h for h in self.cfg.hosts}
        found = {}
        for rank, record in ranks.items():
            label = by_name.get(record.get("host"))
            if label not in hosts:
                found[rank] = f"(no stack: no node of target {self.name} is {record.get('host')})"
                continue
            try:
                done = self._client(hosts[label]).run(
                    shlex.join(procs.py_spy_argv((handle or {}).get("python"), record.get("pid"))),
                    timeout=60,
                    what="py-spy",
                )
            except TargetError as exc:
                found[rank] = f"(no stack: {exc})"
                continue
            out = done.stdout.decode(errors="replace")
            found[rank] = (
                out
                if done.returncode == 0
                else (
                    f"(no stack: py-spy failed on {label}: "
                    f"{(done.stderr.decode(errors='replace') or out).strip()[-400:]})"
                )
            )
        return found

    def leftovers(self, run_id: str) -> list[str]:
        """Processes of the run still alive on each node; a node that cannot be asked is
        reported as not verified. Right after ``stop``, its own final check is the answer."""
        if self._fresh_leftovers:
            self._fresh_leftovers = False
            found = [f"{host}: {line}" for host, left in self._left.items() for line in left]
            found += [
                f"{f.label}: not verified: the node did not answer when the run ended"
                for f in self._started
                if f.label not in self._left
            ]
            return found
        found = []
        for folder, result in zip(
            self._started, _parallel(lambda f: f.leftovers(run_id), self._started)
        ):
            if isinstance(result, TrainerError):
                found.append(f"{folder.label}: not verified: {result}")
            else:
                found += [f"{folder.label}: {line}" for line in result]
        return found

    def collect(self, handle: Handle) -> dict[str, Any]:
        """Each node's outputs/ (taken by ``stop``) merged here, node 0 first; the last bytes
        of the logs and events came with them."""
        self._closed = True  # the follow sessions stay open for discard_workdirs
        if self._files is None:
            return {}
        report: dict[str, Any] = {}
        for folder in self._started:
            merged = folder.collect()
            report[folder.label] = (
                merged
                if merged is not None
                else {
                    "error": "the node did not answer when the run ended; its last logs and "
                    "outputs are still there"
                }
            )
        self._files.flush_partial()
        return {"nodes": report, "mirrored_bytes": self._files.bytes_written}

    def snapshot_hashes(self, handle: Handle) -> dict[str, str | None]:
        return dict(folder.snapshot_hash() for folder in self._started)

    def discard_workdirs(self, handle: Handle | None, run_dir: str) -> dict[str, Any]:
        """Each node's ``<run>/work/``, removed by the node's agent (asked through the
        node's follow session, still open after the end, or in a call of its own)."""
        report: dict[str, Any] = {"removed": []}
        for result in _parallel(lambda f: f.discard(), self._started):
            if isinstance(result, TrainerError):
                report.setdefault("errors", []).append(str(result))
            else:
                report["removed"] += result
        return report

    def release(self, handle: Handle | None) -> None:
        for folder in self._folders:
            folder.stop_following()

    def _log(self, text: str) -> None:
        if self._files is not None:
            self._files.log(text if text.endswith("\n") else text + "\n")


def _end_args(handle: Handle, folder: RemoteFolder, run_id: str, grace: float) -> dict[str, Any]:
    """What a node's ``stop`` or ``finish`` needs: the run, its launcher's ids there."""
    ids = next((n for n in handle.get("nodes", []) if n.get("host") == folder.label), {})
    return {
        "run_id": run_id,
        "pgid": ids.get("pgid"),
        "start_ticks": ids.get("start_ticks"),
        "grace": grace,
        "outputs": True,
        "run_dir": folder.run_dir,
    }
