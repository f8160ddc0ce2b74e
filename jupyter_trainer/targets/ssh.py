"""The ssh target: nodes reached with the system OpenSSH client, one launcher per node
(torchrun) or one on node 0 that reaches the others over ssh itself (mpirun, horovodrun).

A run goes through the hooks in this order, all inside the run's supervisor:

- ``plan``: ``ssh -G`` per host (local), then on every node at once the agent's
  pre-flight (interpreter and version, imports, GPUs, tools, a free port on node 0, whether
  the snapshot is there). Any failure stops the run here, naming each node; nothing is
  launched. Missing snapshots are sent (content-addressed, so an unchanged one is not).
- ``start``: the run folder on every node (``<workdir>/runs/<id>``, ``code`` -> the
  snapshot), each launcher in its own session, then one follow session per node.
- ``poll``/``sync``: launcher states and new bytes of logs, events and rank records, from
  the follow sessions (ssh_node.py, mirror.py); a node unreachable for ``node_timeout``
  seconds is lost, and the run fails naming it.
- ``stop``/``leftovers``: on each node, SIGTERM then SIGKILL of the launcher's group and of
  every process carrying ``JT_RUN_ID``, then what is still alive, the last bytes of its
  files and its ``outputs/``, all in one answer through the follow session (``finish``).
- ``collect``: every node's ``outputs/`` and ``logs/user/`` merged into the local ones.
- ``discard_workdirs``: each node's ``<run>/work/`` removed (the run ended well).
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

from ..errors import TargetError, TrainerError
from ..home import default_home
from ..launch import Command, LaunchPlan
from ..spec import RunSpec
from . import agent_calls
from .base import Handle, Target
from .mirror import FrameReader, LocalFiles, NodeFollower, merge_outputs, parse_answer
from .ssh_client import SshClient, control_dir, user_config_file
from .ssh_commands import (HostConfig, Node, NodeLaunch, SshConfig, agent_command,
                           node_launches, snapshot_dir_name)
from .ssh_prepare import (hop_options, is_ip, judge, launcher_tools, node_address,
                          required_modules, snapshot_tarball)

T = TypeVar("T")
PUMP_S = 0.1  # the supervisor syncs every 50 ms; reading the follow sessions this often is plenty


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
        raise TargetError(f"{what}; nothing was launched:\n  " + "\n  ".join(errors)
                          if len(errors) > 1 else f"{errors[0]}; nothing was launched")


class SshTarget(Target):
    kind = "ssh"  # nodes have their own filesystems: shares_filesystem stays False

    def __init__(self, name: str, config: dict[str, Any] | None = None) -> None:
        super().__init__(name, config)
        self.cfg = SshConfig.from_config(name, self.config)
        self._run_id = ""
        self._snapshot = ""
        self._nodes: list[Node] = []
        self._clients: dict[str, SshClient] = {}
        self._preflight: list[dict[str, Any]] = []
        self._environments: dict[str, dict[str, Any]] = {}  # host -> its built environment
        self._staged: dict[str, Any] = {}
        self._launches: list[NodeLaunch] = []
        self._started: list[Node] = []
        self._followers: list[NodeFollower] = []
        self._files: LocalFiles | None = None
        self._last_pump = 0.0
        self._closed = False
        self._finished = False                   # the first stop ended the run on the nodes
        self._left: dict[str, list[str]] = {}    # host -> what was alive after it
        self._outputs: dict[str, bytes] = {}     # host -> its outputs/ and logs/user/, a tar
        self._snapshots: dict[str, Any] = {}     # host -> its snapshot's path and hash at the end
        self._fresh_leftovers = False

    def gpus_per_node(self) -> int:
        return self.cfg.gpus_per_node

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind,
                "hosts": [h.host for h in self.cfg.hosts], "workdir": self.cfg.workdir,
                "gpus_per_node": self.cfg.gpus_per_node}

    # -- submit side -------------------------------------------------------------------
    def check(self, spec: RunSpec) -> None:
        launch = spec.launch
        if launch.nodes > len(self.cfg.hosts):
            raise TargetError(f"target {self.name!r} has {len(self.cfg.hosts)} host(s) and "
                              f"--nodes is {launch.nodes}; add hosts or ask for fewer nodes")
        self._check_processes(spec, "hosts")
        hosts = self.cfg.hosts[:launch.nodes]
        if launch.nodes > 1 and launch.launcher in ("mpirun", "horovod"):
            for key in ("workdir", "python"):
                if len({getattr(h, key) or getattr(self.cfg, key) for h in hosts}) > 1:
                    raise TargetError(
                        f"--launcher {launch.launcher} starts every rank with node 0's paths, "
                        f"so the hosts of target {self.name!r} must share one {key}")
        if not shutil.which("ssh"):
            raise TargetError("the ssh target needs the OpenSSH client on this machine: "
                              "apt-get install openssh-client")

    def _check_processes(self, spec: RunSpec, nodes: str) -> None:
        """What a target that starts the ranks directly on its ``nodes`` cannot run."""
        if spec.env.image:
            raise TargetError(f"target {self.name!r} starts processes directly on its {nodes} "
                              f"and cannot run the container image {spec.env.image!r}")
        if self.resolve_backend(spec.launch) == "nccl" and not self.cfg.gpus_per_node:
            raise TargetError(f"--backend nccl needs GPUs and target {self.name!r} sets no "
                              "gpus_per_node; set it, or use --backend gloo")

    # -- plan: resolve, pre-flight, stage ----------------------------------------------
    def _client(self, host: HostConfig) -> SshClient:
        if host.host not in self._clients:
            self._clients[host.host] = SshClient(
                host.host, str(control_dir(default_home())), self.cfg.ssh_options,
                self.cfg.ssh_config or user_config_file(), self.cfg.connect_timeout,
                self.cfg.control_persist)
        return self._clients[host.host]

    def _python(self, host: HostConfig, spec: RunSpec) -> str:
        return host.python or self.cfg.python or spec.env.python or sys.executable

    def plan(self, spec: RunSpec, run_id: str, run_dir: str, backend: str) -> LaunchPlan:
        launch = spec.launch
        self._run_id = run_id
        self._files = LocalFiles(run_dir)
        self._snapshot = snapshot_dir_name(spec.code.hash)
        hosts = list(self.cfg.hosts[:launch.nodes])
        started = time.monotonic()
        resolved = _parallel(lambda h: self._client(h).resolve(), hosts)
        _raise_any(resolved, "some hosts cannot be used")
        names = sorted({o["hostname"][0] for o in resolved if not is_ip(o["hostname"][0])})
        modules, versions = required_modules(spec, Path(run_dir) / "code")
        jobs = [(i, h) for i, h in enumerate(hosts)]
        named = spec.env.name is not None  # the imports are checked in the environment
        pre = _parallel(lambda job: self._preflight_node(
            job[1], self._python(job[1], spec), {
                "modules": [] if named else modules, "versions": [] if named else versions,
                "snapshot": self._snapshot, "tools": launcher_tools(launch, job[0]),
                "gpus": self.cfg.gpus_per_node > 0,
                "resolve": names if job[0] == 0 else [], "port": job[0] == 0}), jobs)
        _raise_any(pre, "pre-flight failed on some nodes")
        self._preflight = pre  # type: ignore[assignment]
        self._judge(hosts)
        pythons = [self._python(h, spec) for h in hosts]
        if named:
            pythons = self._realise_environment(spec, hosts, modules, versions)
            self._judge(hosts)  # now with the environment's imports
        self._nodes = [Node(i, h.host, node_address(h, o, self._preflight[0]["resolved"]),
                            p["workdir"], python, hop_options(o))
                       for i, (h, o, p, python) in enumerate(
                           zip(hosts, resolved, self._preflight, pythons))]
        self._log(f"[jt] pre-flight of {len(hosts)} node(s) took "
                  f"{time.monotonic() - started:.2f} s: " + "; ".join(
                      f"{n.host} ({n.address}) python {p['python']}, torch "
                      f"{p['versions'].get('torch')}" for n, p in zip(self._nodes, self._preflight)))
        self._stage(Path(run_dir) / "code")
        first, info = self._nodes[0], self._preflight[0]
        remote = first.run_dir(run_id)
        return LaunchPlan(
            run_id=run_id, run_dir=remote, python=first.python,
            boot=f"{remote}/code/_jt/boot.py", entry=spec.code.entry, args=spec.code.args,
            backend=backend, backend_forced=launch.backend is not None,
            master_addr=first.address, master_port=int(info["port"]),
            run_as_root=bool(info["root"]),
            oversubscribe=launch.procs > min(p["cpus"] for p in self._preflight),
            extra_env=dict(self.cfg.env))

    def _judge(self, hosts: Sequence[HostConfig]) -> None:
        _raise_any([judge(h.host, p, self.cfg.gpus_per_node)
                    for h, p in zip(hosts, self._preflight)], "pre-flight failed on some nodes")

    def _preflight_node(self, host: HostConfig, python: str, args: dict[str, Any]) -> dict:
        return agent_calls.preflight(self._client(host), python, host.workdir or self.cfg.workdir,
                                     args, self.cfg.connect_timeout + 60)

    def _realise_environment(self, spec: RunSpec, hosts: Sequence[HostConfig],
                             modules: list[str], versions: list[str]) -> list[str]:
        """Build the run's locked environment on every node (each keeps it cached under
        ``<workdir>/envs``), check the imports with its python, and return those pythons."""
        check = {"modules": modules, "versions": versions}
        started = time.monotonic()

        def realise(job: tuple[int, HostConfig]) -> dict[str, Any]:
            index, host = job
            info = self._preflight[index]
            return agent_calls.build_environment(
                self._client(host), self._python(host, spec), info["agent"], info["workdir"],
                spec.env, check, uv=self.cfg.uv,
                timeout=self.cfg.connect_timeout + self.cfg.env_timeout)

        answers = _parallel(realise, list(enumerate(hosts)))
        _raise_any(answers, f"environment {spec.env.name!r} could not be realised on some nodes")
        self._environments = {}
        for host, info, ans in zip(hosts, self._preflight, answers):
            env, checked = ans["environment"], ans["check"]  # type: ignore[index]
            info.update({k: checked[k] for k in ("python", "executable", "missing", "versions")})
            self._environments[host.host] = {
                k: env.get(k) for k in ("python", "env_id", "built", "build_seconds", "built_at")}
        built = [h for h, e in self._environments.items() if e["built"]]
        self._log(f"[jt] environment {spec.env.name!r} ready on {len(hosts)} node(s) in "
                  f"{time.monotonic() - started:.2f} s"
                  + (f" (built on {', '.join(built)})" if built else " (cached)") + "\n")
        return [e["python"] for e in self._environments.values()]

    def _environment_record(self) -> dict[str, Any]:
        """What the run's state says about the environment built on the nodes."""
        first, info = self._environments[self._nodes[0].host], self._preflight[0]
        seconds = [e["build_seconds"] for e in self._environments.values()
                   if e["built"] and e.get("build_seconds") is not None]
        return {"python": first["python"], "env_id": first["env_id"],
                "python_version": info["python"], "torch": info["versions"].get("torch"),
                "built": any(e["built"] for e in self._environments.values()),
                "build_seconds": max(seconds) if seconds else None,
                "built_at": first.get("built_at"), "nodes": self._environments}

    def _stage(self, code: Path) -> None:
        """Send the snapshot to every node that lacks it."""
        missing = [n for n, p in zip(self._nodes, self._preflight) if not p.get("snapshot")]
        self._staged = {"snapshot": self._snapshot,
                        "sent_to": [n.host for n in missing],
                        "already_on": [n.host for n in self._nodes if n not in missing]}
        for node, info in zip(self._nodes, self._preflight):
            if info.get("snapshot_set_aside"):
                self._staged.setdefault("changed_copies_set_aside", {})[node.host] = \
                    info["snapshot_set_aside"]
                self._log(f"[jt] {node.host}: the node's copy of snapshot {self._snapshot} had "
                          f"been changed by a run; moved to {info['snapshot_set_aside']} and "
                          "staged again\n")
        if not missing:
            return
        started = time.monotonic()
        payload = snapshot_tarball(code)

        def send(node: Node) -> dict[str, Any]:
            return agent_calls.send_snapshot(
                self._clients[node.host], node.python, self._preflight[node.index]["agent"],
                node.workdir, self._snapshot, payload, self.cfg.connect_timeout + 600)

        results = _parallel(send, missing)
        _raise_any(results, "the snapshot could not be sent")
        self._staged.update(bytes=len(payload), seconds=round(time.monotonic() - started, 3))
        self._log(f"[jt] snapshot {self._snapshot} ({len(payload)} bytes) sent to "
                  f"{', '.join(n.host for n in missing)} in {self._staged['seconds']} s\n")

    def _agent(self, node: Node, sub: str, args: dict[str, Any] | None = None) -> str:
        info = self._preflight[node.index]
        return agent_command(node.python, info["agent"], node.workdir, sub, args)

    # -- launch ------------------------------------------------------------------------
    def command(self, spec: RunSpec, plan: LaunchPlan) -> Command:
        real_ssh = self._preflight[0]["tools"].get("ssh") or "ssh"
        self._launches = node_launches(spec.launch, plan, self._nodes, real_ssh=real_ssh,
                                       network_interfaces=self.cfg.network_interfaces)
        return self._launches[0].command or Command(())

    def start(self, command: Command, run_dir: str, log_path: str) -> Handle:
        self._started = list(self._nodes)
        # Nodes without a launcher first: mpirun's ranks need their run folder to exist.
        order = sorted(self._launches, key=lambda item: item.command is not None)

        spec_json = (Path(run_dir) / "spec.json").read_text()  # the ranks read params there

        def start_one(item: NodeLaunch) -> dict[str, Any]:
            payload = item.payload(self._snapshot, self.cfg.orphan_timeout)
            payload["files"]["spec.json"] = spec_json
            done = self._clients[item.node.host].run(
                self._agent(item.node, "start"), input=_json_bytes(payload),
                timeout=self.cfg.connect_timeout + 60, what="starting the launcher")
            answer = parse_answer(item.node.host, done, "starting the launcher")
            if answer.get("error"):
                raise TargetError(f"node {item.node.host}: {answer['error']}")
            return answer

        prepared = _parallel(start_one, [i for i in order if i.command is None])
        launched = _parallel(start_one, [i for i in order if i.command is not None])
        _raise_any([*prepared, *launched], "the run could not start on every node")
        answers = {item.node.index: a for item, a in zip(order, [*prepared, *launched])}
        for node in self._nodes:
            self._followers.append(NodeFollower(
                self._clients[node.host],
                lambda n=node: self._agent(n, "follow", {"run_dir": n.run_dir(self._run_id),
                                                         "node": n.index}),
                node.index, node.host, self._files, self.cfg.node_timeout))
        for follower in self._followers:
            follower.start()
        nodes = []
        for item in self._launches:
            a = answers[item.node.index]
            nodes.append({"host": item.node.host, "address": item.node.address,
                          "run_dir": item.run_dir, "launcher": item.command is not None,
                          **{k: a[k] for k in ("pid", "pgid", "start_ticks", "keeper") if k in a}})
        return {"target": self.name, "kind": self.kind, "hosts": [n.host for n in self._nodes],
                "nodes": nodes, "run_dir_remote": self._nodes[0].run_dir(self._run_id),
                "staging": self._staged,
                **({"environment": self._environment_record()} if self._environments else {}),
                "preflight": {n.host: {k: p.get(k) for k in ("hostname", "python", "versions",
                                                            "gpus")}
                              for n, p in zip(self._nodes, self._preflight)}}

    # -- while it runs -----------------------------------------------------------------
    def _pump(self, force: bool = False) -> None:
        now = time.monotonic()
        if self._closed or (not force and now - self._last_pump < PUMP_S):
            return
        self._last_pump = now
        for follower in self._followers:
            follower.pump()

    def sync(self, handle: Handle) -> None:
        self._pump()

    def _exit_code(self) -> int | None:
        codes = [f.status.get("exit") for f, item in zip(self._followers, self._launches)
                 if item.command is not None]
        failed = [c for c in codes if c not in (None, 0)]
        if failed:
            return failed[0]
        return 0 if codes and all(c == 0 for c in codes) else None

    def poll(self, handle: Handle) -> int | None:
        if self._closed:
            return self._exit_code()
        self._pump()
        code = self._exit_code()
        for follower in self._followers:
            down = follower.lost_for()
            if down > self.cfg.node_timeout or (down and code not in (None, 0)):
                raise TargetError(
                    f"node {follower.label} ({self._nodes[follower.node].address}) was lost: "
                    f"unreachable for {down:.0f} s ({follower.error})")
        return code

    # -- teardown ----------------------------------------------------------------------
    def _stop_following(self) -> None:
        for follower in self._followers:
            follower.kill()

    def stop(self, handle: Handle, run_id: str, grace: float) -> dict[str, Any]:
        """The first stop also takes each node's last files, leftovers and outputs in the
        same answer (``finish``), asked through the node's follow session when it is up, so
        ending a run costs no new connection; a node without one gets a call of its own."""
        by_host = {n.get("host"): n for n in handle.get("nodes", [])}
        first = not self._finished

        def args_for(node: Node) -> dict[str, Any]:
            ids = by_host.get(node.host, {})
            return {"run_id": run_id, "pgid": ids.get("pgid"),
                    "start_ticks": ids.get("start_ticks"), "grace": grace, "outputs": True}

        answers: dict[str, tuple[dict[str, Any], bytes] | TrainerError] = {}
        if first:
            self._finished = True
            followers = {f.node: f for f in self._followers}
            asked = [n for n in self._started
                     if n.index in followers and followers[n.index].request_finish(args_for(n))]
            for node in asked:
                got = followers[node.index].await_finish(self.cfg.connect_timeout + grace + 30)
                if got is not None:
                    answers[node.host] = got
        self._stop_following()
        self._closed = True

        def call(node: Node) -> tuple[dict[str, Any], bytes]:
            args = args_for(node)
            sub, data = "stop", None
            if first:
                sub = "finish"
                args.update(run_dir=node.run_dir(self._run_id), node=node.index)
                data = _json_bytes({"offsets": self._files.resume_offsets(node.index)
                                    if self._files else {}}) + b"\n"
            done = self._clients[node.host].run(
                self._agent(node, sub, args), input=data,
                timeout=self.cfg.connect_timeout + grace + (600 if first else 20),
                what="ending the run")
            answer = parse_answer(node.host, done, "ending the run")
            return answer, self._apply_frames(node, done.stdout)

        rest = [n for n in self._started if n.host not in answers]
        for node, result in zip(rest, _parallel(call, rest)):
            answers[node.host] = result
        report: dict[str, Any] = {}
        for node in self._started:
            result = answers[node.host]
            if isinstance(result, TrainerError):
                report[node.host] = {"error": str(result)}
                continue
            answer, tar = result
            report[node.host] = {"sigterm": answer.get("sigterm"),
                                 "sigkilled": answer.get("sigkilled", [])}
            if first:
                self._outputs[node.host] = tar
                self._left[node.host] = answer.get("leftovers", [])
                self._snapshots[node.host] = answer.get("snapshot")
        self._fresh_leftovers = first
        return {"nodes": report,
                "sigkilled": [f"{h}: {p}" for h, r in report.items() for p in r.get("sigkilled", [])]}

    def _apply_frames(self, node: Node, stdout: bytes) -> bytes:
        """Apply an answer's file frames; return the outputs tar it carried."""
        tar = bytearray()
        followers = {f.node: f for f in self._followers}
        for header, payload in FrameReader().feed(stdout):
            kind = header.get("t")
            if kind == "tar":
                tar += payload
            elif kind == "status":
                if node.index in followers:
                    followers[node.index].status = header
            elif self._files is not None:
                self._files.apply(node.index, node.host, header, payload)
        return bytes(tar)

    def leftovers(self, run_id: str) -> list[str]:
        """Processes of the run still alive on each node; a node that cannot be asked is
        reported as not verified. Right after ``stop``, its own final check is the answer."""
        if self._fresh_leftovers:
            self._fresh_leftovers = False
            found = [f"{host}: {line}" for host, left in self._left.items() for line in left]
            found += [f"{n.host}: not verified: the node did not answer when the run ended"
                      for n in self._started if n.host not in self._left]
            return found

        def ask(node: Node) -> list[str]:
            done = self._clients[node.host].run(
                self._agent(node, "leftovers", {"run_id": run_id}),
                timeout=self.cfg.connect_timeout + 20, what="checking for leftover processes")
            return parse_answer(node.host, done, "checking for leftover processes")["leftovers"]

        found = []
        for node, result in zip(self._started, _parallel(ask, self._started)):
            if isinstance(result, TrainerError):
                found.append(f"{node.host}: not verified: {result}")
            else:
                found += [f"{node.host}: {line}" for line in result]
        return found

    def collect(self, handle: Handle) -> dict[str, Any]:
        """Each node's outputs/ (taken by ``stop``) merged here, node 0 first; the last bytes
        of the logs and events came with them."""
        self._stop_following()
        self._closed = True
        if self._files is None:
            return {}
        report: dict[str, Any] = {}
        for node in self._started:
            if node.host in self._outputs:
                report[node.host] = merge_outputs(self._outputs.pop(node.host),
                                                  Path(self._files.root))
            else:
                report[node.host] = {"error": "the node did not answer when the run ended; "
                                              "its last logs and outputs are still there"}
        self._files.flush_partial()
        return {"nodes": report, "mirrored_bytes": self._files.bytes_written}

    def snapshot_hashes(self, handle: Handle) -> dict[str, str | None]:
        found: dict[str, str | None] = {}
        for node in self._started:
            seen = self._snapshots.get(node.host)
            where = seen["path"] if seen else f"{node.workdir}/snapshots/{self._snapshot}"
            found[f"{node.host}:{where}"] = seen["hash"] if seen else None
        return found

    def discard_workdirs(self, handle: Handle | None, run_dir: str) -> dict[str, Any]:
        """Each node's ``<run>/work/``, removed through the node's agent."""
        def discard(node: Node) -> dict[str, Any]:
            done = self._clients[node.host].run(
                self._agent(node, "discard", {"run_dir": node.run_dir(self._run_id)}),
                timeout=self.cfg.connect_timeout + 60, what="removing the working directories")
            return parse_answer(node.host, done, "removing the working directories")

        report: dict[str, Any] = {"removed": []}
        for node, result in zip(self._started, _parallel(discard, self._started)):
            if isinstance(result, TrainerError):
                report.setdefault("errors", []).append(str(result))
            else:
                report["removed"] += [f"{node.host}:{p}" for p in result.get("removed", [])]
        return report

    def _log(self, text: str) -> None:
        if self._files is not None:
            self._files.log(text if text.endswith("\n") else text + "\n")


def _json_bytes(data: Any) -> bytes:
    return json.dumps(data).encode()
