"""The ray target: a Ray cluster's nodes, reserved as a placement group, running the ranks
the way the ssh target runs them on its hosts.

Ray provides placement, processes and transport; everything else is the ssh target's node
lifecycle, unchanged (see ../ssh/): the supervisor is a Ray driver; ``reserve`` asks for a
placement group of ``--nodes`` bundles of ``--procs`` CPUs (STRICT_SPREAD: one node each)
and the run stays ``queued`` with Ray's own reason until it is granted; ``plan`` binds a
node shell to each bundle's node (rankside/programs/ray_actor.py: a detached actor per node, named for
it, reused by the runs that follow and ended by itself after ``shell_persist`` idle seconds;
or, with ``shell_persist = 0``, an actor of the run's own in its bundle) and through it runs
the node agent's pre-flight, environment build and snapshot staging on every node; ``start``
starts one launcher per node (torchrun's c10d rendezvous at the first bundle's node); the
live mirror, ``finish``, outputs and snapshot hashes follow as on ssh. Teardown ends the
launchers through the agent, kills the run's own actors and removes the placement group;
the leftover scan then runs on each node the run used. A new worker process per node for
each run would cost Ray a Python start and its imports; a shared shell costs that once.

Each node works under ``<workdir>/<ray node id>``, so two Ray nodes that share a filesystem
never share a run folder. mpirun and horovodrun reach the other nodes over ssh, which a Ray
cluster does not give; they run on one node only.

Before anything is created, ``check`` asks the cluster for its facts (alive nodes, their
CPUs, GPUs, python and torch) from a short-lived child driver, ``python -m
jupyter_trainer.targets.ray ADDRESS`` (cluster.py), so a notebook kernel never becomes a Ray
driver just to check a target; ``ray`` is imported only inside the functions that need it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ... import rankside
from ...core.errors import TargetError, TrainerError
from ...core.spec import RunSpec
from ...launchers.table import LaunchPlan
from ...nodes import calls
from ...nodes.commands import agent_file, bootstrap_command, bootstrap_input, snapshot_dir_name
from ...nodes.folder import Node
from ...nodes.frames import parse_answer
from ...nodes.mirror import LocalFiles
from ...rankside.host.home import default_home
from ...rankside.programs.ray_actor import still_running
from ..base import Handle, refuse_ranks_beyond_gpus
from ..ssh.commands import HostConfig
from ..ssh.parallel import parallel
from ..ssh.target import SshTarget
from . import placement
from .cluster import cluster_facts, connect, judge_cluster, require_ray
from .config import NAMESPACE, RayConfig
from .shell import RayShell, pinned_call

QUEUE_CHECK_S = 1.0  # how often plan() looks at a placement group it waits for
DRY_RUN_PORT = 29500  # a dry run's rendezvous port: node 0 finds a free one at the start
SETTLE_S = 10.0  # how long killed actors get to be gone from their nodes
SHELL_HOLD_S = 30.0  # a shared node shell a run has found lives this long, whatever its idle time


class RayTarget(SshTarget):
    kind = "ray"
    node_sessions = False  # each step is a call through the node's actor

    def __init__(self, name: str, config: dict[str, Any] | None = None) -> None:
        ray_cfg = RayConfig.from_config(name, dict(config or {}))
        super().__init__(name, {"hosts": ["ray"]})
        self.config = dict(config or {})
        self.ray_cfg = ray_cfg
        self.cfg = ray_cfg.nodes
        self._pg: Any = None
        self._pg_ready = False
        self._bundle: dict[str, float] = {}
        self._strategy = ""
        self._actors: list[Any] = []
        # The node shells, by label: what _client() hands the node layer for each node.
        self._shells: dict[str, RayShell] = {}
        self._facts: list[dict[str, Any]] = []
        self._released = False

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "address": self.ray_cfg.address,
            "workdir": self.cfg.workdir,
            "gpus_per_node": self.cfg.gpus_per_node,
            "autoscaling": self.ray_cfg.autoscaling,
        }

    # -- submit side -------------------------------------------------------------------
    def check(self, spec: RunSpec) -> None:
        refuse_ranks_beyond_gpus(self, spec.launch, "each node has (gpus_per_node)")
        launch = spec.launch
        self._check_processes(spec, "Ray nodes")
        if launch.nodes > 1 and launch.launcher in ("mpirun", "horovod"):
            raise TargetError(
                f"--launcher {launch.launcher} reaches the other nodes over ssh, "
                "which a Ray cluster does not provide; use --launcher torchrun "
                "for several Ray nodes (or --nodes 1)"
            )
        facts = cluster_facts(
            self.ray_cfg.address, self.cfg.connect_timeout + 30, default_home() / "cache"
        )
        judge_cluster(
            self.name,
            facts,
            launch.nodes,
            launch.procs,
            self.cfg.gpus_per_node,
            self.ray_cfg.autoscaling,
            launch.launcher in ("torchrun", "horovod")
            and spec.env.name is None
            and not self.cfg.python,
        )

    # -- the reservation ---------------------------------------------------------------
    def warm_up(self) -> None:
        try:
            import ray  # noqa: F401 (about a second; the supervisor waits for its run anyway)

            from ...rankside.programs import ray_actor  # noqa: F401
        except ImportError:
            pass  # check() already refused the run, or _connect() will say why

    def _connect(self) -> Any:
        require_ray()
        import ray

        from ...rankside.programs import ray_actor

        ray.cloudpickle.register_pickle_by_value(ray_actor)  # nodes need no jupyter_trainer
        if not ray.is_initialized():
            try:
                connect(
                    ray,
                    self.ray_cfg.address,
                    namespace=NAMESPACE,
                    log_to_driver=False,
                    logging_level=logging.WARNING,
                )
            except Exception as exc:
                raise TargetError(
                    f"cannot connect to the Ray cluster at "
                    f"{self.ray_cfg.address}: {' '.join(str(exc).split())[:400]}"
                ) from exc
        return ray

    def reserve(self, spec: RunSpec, run_id: str, run_dir: str) -> Handle | None:
        """Ask Ray for the run's placement group; the supervisor keeps the run ``queued``
        (``phase``) until Ray grants it."""
        self._connect()
        from ray.util.placement_group import placement_group

        launch = spec.launch
        self._run_id = run_id
        self._files = LocalFiles(run_dir)
        self._bundle = {"CPU": float(launch.procs)}
        if self.cfg.gpus_per_node:
            self._bundle["GPU"] = float(self.cfg.gpus_per_node)
        self._strategy = "STRICT_SPREAD" if launch.nodes > 1 else "PACK"
        self._pg = placement_group(
            [dict(self._bundle) for _ in range(launch.nodes)],
            strategy=self._strategy,
            name=f"jt-{run_id}",
        )
        self._log(
            f"[jt] Ray placement group {self._pg.id.hex()}: {launch.nodes} bundle(s) of "
            f"{self._bundle_words()}, {self._strategy}"
        )
        return {
            "target": self.name,
            "kind": self.kind,
            "address": self.ray_cfg.address,
            "placement_group": self._pg.id.hex(),
            "bundles": launch.nodes,
            "bundle": dict(self._bundle),
            "strategy": self._strategy,
        }

    def _bundle_words(self) -> str:
        return placement.words(self._bundle)

    def phase(self, handle: Handle) -> dict[str, Any]:
        if self._pg is None or self._pg_ready:
            return {"stage": "running"}
        found = placement.phase(self._pg, self._bundle, self._strategy)
        if found["stage"] == "running":
            self._pg_ready = True
        return found

    def _await_placement(self) -> None:
        """For a caller that did not wait in the queue: wait here, bounded unless the cluster
        may grow."""
        limit = None if self.ray_cfg.autoscaling else self.cfg.connect_timeout
        started = time.monotonic()
        while (phase := self.phase({}))["stage"] != "running":
            if limit is not None and time.monotonic() - started > limit:
                raise TargetError(
                    f"{phase['reason']}; ask for fewer nodes or processes, or set "
                    "autoscaling = true if the cluster grows"
                )
            time.sleep(QUEUE_CHECK_S)

    # -- plan: the node shells, then the ssh target's pre-flight and staging -------------
    def _bind_nodes(self, spec: RunSpec, run_id: str, run_dir: str) -> None:
        """One node-shell actor per bundle, each a node of the run as the ssh target sees it."""
        ray = self._connect()
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from ...rankside.programs.ray_actor import NodeActor

        if self._pg is None:
            self.reserve(spec, run_id, run_dir)
        self._await_placement()
        # No runtime_env of the run's own: Ray then hands the actors idle workers it has
        # already started, where a new runtime_env would cost a new worker process per node.
        # The actors are found at the end by their pids (``_scan``), not by JT_RUN_ID.
        extra = {"runtime_env": dict(self.ray_cfg.runtime_env)} if self.ray_cfg.runtime_env else {}
        shell = ray.remote(NodeActor)
        started = time.monotonic()
        persist = self.ray_cfg.shell_persist
        if persist:  # the nodes' shared shells: found by name, started on first use
            from ray.util.placement_group import placement_group_table
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            on = placement_group_table(self._pg)["bundles_to_node_id"]

            def renew(i: int) -> Any:
                return shell.options(
                    name=self._shell_name(on[i]),
                    lifetime="detached",
                    get_if_exists=True,
                    num_cpus=0,
                    max_concurrency=64,
                    max_restarts=0,
                    **extra,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(on[i], soft=False),
                ).remote(persist)

            self._actors = [renew(i) for i in range(spec.launch.nodes)]
        else:
            self._actors = [
                shell.options(
                    name=f"jt-{run_id}-{i}",
                    num_cpus=0,
                    max_concurrency=64,
                    max_restarts=0,
                    **extra,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        self._pg, placement_group_bundle_index=i
                    ),
                ).remote()
                for i in range(spec.launch.nodes)
            ]
        self._facts = self._shell_facts(ray, renew if persist else None)
        hosts = []
        self._shells = {}
        for actor, facts in zip(self._actors, self._facts):
            label = f"ray-{facts['node_id'][:8]}"
            hosts.append(
                HostConfig(
                    label,
                    posixpath.join(self.cfg.workdir, facts["node_id"]),
                    self.cfg.python or facts["python"],
                    facts["address"],
                )
            )
            self._shells[label] = RayShell(label, facts["node_id"], facts["address"], actor)
        self.cfg = replace(self.cfg, hosts=tuple(hosts))
        self._log(
            f"[jt] {len(hosts)} Ray node shell(s) up in {time.monotonic() - started:.2f} s: "
            + ", ".join(f"{h.host} ({h.address})" for h in hosts)
        )

    def _shell_facts(self, ray: Any, renew: Callable[[int], Any] | None) -> list[dict[str, Any]]:
        """Each node shell's facts. A shared shell that was ending itself (idle) as the run
        found it answers None, or is already gone: a new one is started in its place, until
        the connect timeout."""
        deadline = time.monotonic() + self.cfg.connect_timeout + 60
        facts: list[Any] = [None] * len(self._actors)
        while True:
            refs = {
                i: a.facts.remote(SHELL_HOLD_S)
                for i, a in enumerate(self._actors)
                if facts[i] is None
            }
            last: Exception | None = None
            for i, ref in refs.items():
                try:
                    facts[i] = ray.get(ref, timeout=max(1.0, deadline - time.monotonic()))
                except Exception as exc:
                    last = exc
            ending = [i for i, f in enumerate(facts) if f is None]
            if not ending:
                return facts
            if renew is None or time.monotonic() > deadline:
                why = " ".join(str(last).split())[:400] if last else "its node shell was ending"
                raise TargetError(f"the run's Ray actors did not start: {why}")
            time.sleep(0.5)  # until the ending shell has given up its name
            for i in ending:
                self._actors[i] = renew(i)

    def _shell_name(self, node_id: str) -> str:
        """A node's shared shell, one per version of its code, runtime_env and idle time."""
        code = calls.agent_source() + rankside.source(rankside.RAY_ACTOR)
        digest = hashlib.sha256(
            code
            + repr((sorted(self.ray_cfg.runtime_env.items()), self.ray_cfg.shell_persist)).encode()
        )
        return f"jt-shell-{node_id[:16]}-{digest.hexdigest()[:10]}"

    def _client(self, host: HostConfig) -> RayShell:
        return self._shells[host.host]

    def plan(self, spec: RunSpec, run_id: str, run_dir: str, backend: str) -> LaunchPlan:
        self._bind_nodes(spec, run_id, run_dir)
        return super().plan(spec, run_id, run_dir, backend)

    def dry_plan(self, spec: RunSpec, run_id: str, run_dir: str, backend: str) -> LaunchPlan:
        """The plan on the nodes a placement group would most likely get: the first alive
        nodes that fit a bundle, as ``check`` found them. Nothing is reserved, and no actor
        or agent is started on them: Ray picks the nodes, and node 0 a free rendezvous port,
        when the run starts."""
        launch = spec.launch
        facts = cluster_facts(
            self.ray_cfg.address, self.cfg.connect_timeout + 30, default_home() / "cache"
        )
        fit = [
            n
            for n in facts["nodes"]
            if n["cpus"] >= launch.procs and n["gpus"] >= self.cfg.gpus_per_node
        ]
        if len(fit) < launch.nodes:
            raise TargetError(
                f"the Ray cluster of target {self.name!r} has {len(fit)} node(s) "
                f"that fit a bundle of the run now and it asks for {launch.nodes}; "
                "a dry run shows only nodes that exist (the autoscaler adds the "
                "others when the run starts)"
            )
        self._snapshot = snapshot_dir_name(spec.code.hash)
        self._nodes = [
            Node(
                i,
                f"ray-{n['node_id'][:8]}",
                n["address"],
                posixpath.join(self.cfg.workdir, n["node_id"]),
                self.cfg.python or spec.env.python or n.get("executable") or sys.executable,
            )
            for i, n in enumerate(fit[: launch.nodes])
        ]
        return self._nodes_plan(
            spec,
            run_id,
            backend,
            DRY_RUN_PORT,
            os.geteuid() == 0,
            min(n["cpus"] for n in fit[: launch.nodes]),
        )

    def dry_run_parts(self, spec: RunSpec, plan: LaunchPlan, command: Any) -> dict[str, Any]:
        parts = super().dry_run_parts(spec, plan, command)
        parts["notes"] = [
            *parts["notes"],
            "Ray places the run's bundles when it starts: the "
            "nodes shown are the first alive ones that fit, and the rendezvous "
            f"port {DRY_RUN_PORT} stands for the free one node 0 finds then",
        ]
        return parts

    def start(self, command: Any, run_dir: str, log_path: str) -> Handle:
        handle = super().start(command, run_dir, log_path)
        handle.update(
            address=self.ray_cfg.address,
            placement_group=self._pg.id.hex(),
            bundle=dict(self._bundle),
            strategy=self._strategy,
            ray_nodes={s.host: s.node_id for s in self._shells.values()},
            actor_pids={f"ray-{f['node_id'][:8]}": f["pid"] for f in self._facts},
        )
        return handle

    # -- teardown ----------------------------------------------------------------------
    def stop(self, handle: Handle, run_id: str, grace: float) -> dict[str, Any]:
        """The launchers end through the agent (as on ssh), then the actors and the
        placement group go."""
        report = super().stop(handle, run_id, grace)
        report["ray"] = self._release()
        return report

    def _release(self) -> dict[str, Any]:
        if self._released or (self._pg is None and not self._actors):
            return {}
        self._released = True
        import ray
        from ray.util.placement_group import remove_placement_group

        for folder in self._folders:
            folder.stop_following()
        shared = bool(self.ray_cfg.shell_persist)
        for actor in [] if shared else self._actors:  # shared shells outlive the run
            try:
                ray.kill(actor, no_restart=True)
            except Exception:
                pass
        for shell in [] if shared else self._shells.values():
            shell.actor = None  # later calls go through tasks pinned to the node
        report: dict[str, Any] = {"actors_killed": 0 if shared else len(self._actors)}
        if shared and self._actors:
            report["shells_kept_s"] = self.ray_cfg.shell_persist
        if self._pg is not None:
            remove_placement_group(self._pg)
            report["placement_group_removed"] = self._pg.id.hex()
        return report

    def leftovers(self, run_id: str) -> list[str]:
        """What of the run is still alive: on every node it used, the agent's scan for
        ``JT_RUN_ID`` (through the node's shared shell, or a task pinned to the node) and,
        for actors of the run's own, the actor's process (by pid and start time); and the
        placement group, if Ray still has it. Killed actors get a moment to go."""
        self._release()
        self._fresh_leftovers = False
        deadline = time.monotonic() + SETTLE_S
        while True:
            found = self._scan(run_id)
            if not found or time.monotonic() > deadline:
                return found
            time.sleep(0.2)

    def _scan(self, run_id: str) -> list[str]:
        found: list[str] = []
        if self._pg is not None:
            from ray.util.placement_group import placement_group_table

            state = placement_group_table(self._pg).get("state")
            if state != "REMOVED":
                found.append(f"Ray placement group {self._pg.id.hex()} is still {state}")
        source = calls.agent_source()
        agent = agent_file(hashlib.sha256(source).hexdigest())
        shells = list(self._shells.values())
        pythons = {h.host: h.python for h in self.cfg.hosts}

        def ask(shell: RayShell) -> list[str]:
            done = shell.run(
                bootstrap_command(
                    pythons.get(shell.host) or "python3",
                    self.cfg.workdir,
                    agent,
                    "leftovers",
                    {"run_id": run_id},
                ),
                input=bootstrap_input(source),
                timeout=self.cfg.connect_timeout + 20,
                what="checking for leftover processes",
            )
            return parse_answer(shell.host, done, "checking for leftover processes")["leftovers"]

        def actors_left(shell: RayShell) -> list[str]:
            mine = [
                (f["pid"], f.get("started")) for f in self._facts if f["node_id"] == shell.node_id
            ]
            return pinned_call(shell.node_id, still_running, mine, self.cfg.connect_timeout + 20)

        for shell, result in zip(
            shells, [] if self.ray_cfg.shell_persist else parallel(actors_left, shells)
        ):  # the run's own actors
            if isinstance(result, TrainerError):
                found.append(f"{shell.host}: the run's Ray actor: not verified: {result}")
            else:
                found += [f"{shell.host}: the run's Ray actor, {line}" for line in result]
        for shell, result in zip(shells, parallel(ask, shells)):
            if isinstance(result, TrainerError):
                found.append(f"{shell.host}: not verified: {result}")
            else:
                found += [f"{shell.host}: {line}" for line in result]
        return found
