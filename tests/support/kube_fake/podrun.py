"""One pod's run on the fake node: its init and main containers as real local processes in
their own mount and UTS namespaces, with their statuses, logs, restarts and back-off."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from . import volumes
from .incluster import MOUNT
from .markers import MARKER, MOUNT_NS, forget_mount_ns, live_pids, mount_ns, signal_marker
from .scheduler import NODE
from .store import now

if TYPE_CHECKING:
    from .kubelet import Kubelet

PODINIT = str(Path(__file__).with_name("podinit.py"))


def pod_condition(type_, status, reason=None, message=None):
    c = {"type": type_, "status": status, "lastProbeTime": None, "lastTransitionTime": now()}
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    return c


class PodRun(threading.Thread):
    """One pod on the node: volumes, then init containers in order, then its containers."""

    def __init__(self, kubelet: Kubelet, pod: dict):
        super().__init__(name=f"pod-{pod['metadata']['name']}", daemon=True)
        self.kubelet, self.cluster, self.pod = kubelet, kubelet.cluster, pod
        meta = pod["metadata"]
        self.dir = kubelet.root / f"{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.hosts = self.dir / "hosts"
        self.hosts.write_text("127.0.0.1\tlocalhost\n")
        self.done = threading.Event()
        self.grace: float | None = None
        self.stopped = threading.Event()
        self.ended: set[str] = set()
        self.statuses: dict[str, dict] = {}
        self.restarts: dict[str, int] = {}
        self.last_state: dict[str, dict] = {}
        self.generation: dict[str, int] = {}

    def log_path(self, cname, previous=False):
        path = self.dir / (f"{cname}.log.previous" if previous else f"{cname}.log")
        return path if path.exists() else None

    def finished(self, cname, generation):
        return cname in self.ended or self.done.is_set() or self.generation.get(cname) != generation

    def write_hosts(self, text: str):
        if self.hosts.read_text() != text:
            with open(self.hosts, "r+") as f:  # in place: the containers bind-mount this inode
                f.write(text)
                f.truncate()

    def stop(self, grace):
        if self.grace is None or grace < self.grace:
            self.grace = grace
        self.stopped.set()

    def marker(self, cname):
        """The environment marker of one container ("" for the whole pod)."""
        meta = self.pod["metadata"]
        return f"{self.cluster.token}/{meta['namespace']}/{meta['name']}/" + (
            f"{cname}/" if cname else ""
        )

    # -- status
    def _update(self, change):
        meta = self.pod["metadata"]
        self.cluster.store.mutate(self.kubelet.pod_res, meta["namespace"], meta["name"], change)

    def _cstatus(self, c, state, **extra):
        last = {"terminated": self.last_state[c["name"]]} if c["name"] in self.last_state else {}
        return {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": "",
            "ready": False,
            "started": "running" in state,
            "restartCount": self.restarts.get(c["name"], 0),
            "state": state,
            "lastState": last,
            **extra,
        }

    def _publish(self, phase=None, ready=False, initialized=None):
        spec = self.pod["spec"]
        inits = [self.statuses[c["name"]] for c in spec.get("initContainers") or []]
        mains = [self.statuses[c["name"]] for c in spec["containers"]]

        ip = self.kubelet.pod_ip(self.pod["metadata"]["uid"])

        def change(obj):
            st = obj["status"]
            if phase:
                st["phase"] = phase
            st.update(
                {
                    "hostIP": "127.0.0.1",
                    "hostIPs": [{"ip": "127.0.0.1"}],
                    "podIP": ip,
                    "podIPs": [{"ip": ip}],
                    "containerStatuses": mains,
                }
            )
            st.setdefault("startTime", now())
            if inits:
                st["initContainerStatuses"] = inits
            conds = {c["type"]: c for c in st.get("conditions") or []}
            conds["Initialized"] = pod_condition("Initialized", "True" if initialized else "False")
            for t in ("ContainersReady", "Ready"):
                conds[t] = pod_condition(
                    t,
                    "True" if ready else "False",
                    None
                    if ready
                    else (
                        "PodCompleted" if phase in ("Succeeded", "Failed") else "ContainersNotReady"
                    ),
                )
            st["conditions"] = list(conds.values())

        self._update(change)

    # -- running
    def run(self):
        try:
            self._run()
        except Exception as exc:  # a fault of the fake itself: show it on the pod and to the test
            self.cluster.errors.append(
                f"pod {self.pod['metadata']['name']}:\n{traceback.format_exc()}"
            )
            message = repr(exc)
            self._update(
                lambda o: o["status"].update(
                    phase="Failed", reason="FakeKubeletError", message=message
                )
            )
        finally:
            signal_marker(self.marker(""), signal.SIGKILL)
            deadline = time.monotonic() + 10
            while live_pids(self.marker("")) and time.monotonic() < deadline:
                time.sleep(0.02)
            forget_mount_ns(self.marker(""))
            if self.kubelet.network:
                self.kubelet.network.release(self.pod["metadata"]["uid"])
            self.done.set()
            meta = self.pod["metadata"]
            current = self.cluster.store.find(self.kubelet.pod_res, meta["namespace"], meta["name"])
            if current and current["metadata"].get("deletionTimestamp"):
                self.kubelet._forget(current)
            self.cluster.wake()

    def _run(self):
        spec = self.pod["spec"]
        inits, mains = spec.get("initContainers") or [], spec["containers"]
        for c in inits:
            self.statuses[c["name"]] = self._cstatus(c, {"waiting": {"reason": "PodInitializing"}})
        for c in mains:
            self.statuses[c["name"]] = self._cstatus(
                c, {"waiting": {"reason": ("PodInitializing" if inits else "ContainerCreating")}}
            )
        self._publish(initialized=not inits)
        vols = self._wait_ready(lambda: volumes.materialise(self.cluster, self.pod, self.dir))
        if vols is None:
            return
        for c in inits:
            codes = self._run_containers([c], vols)
            if codes is None:
                return
            if codes[0] != 0:
                self._publish("Failed", initialized=False)
                return
        codes = self._run_containers(mains, vols, main=True)
        if codes is None:
            return
        self._publish("Succeeded" if all(c == 0 for c in codes) else "Failed", initialized=True)

    def _wait_ready(self, make):
        """make(), retried while it reports a missing object (one event per distinct reason)."""
        told = None
        while not self.stopped.is_set():
            try:
                return make()
            except volumes.NotReady as exc:
                if told != exc.message:
                    told = exc.message
                    self.cluster.event(
                        self.pod,
                        "Warning",
                        exc.reason,
                        f"MountVolume.SetUp failed: {exc.message}"
                        if exc.reason == "FailedMount"
                        else f"Error: {exc.message}",
                        "kubelet",
                    )
                self.stopped.wait(0.2)
        return None

    def _start(self, c, vols, node):
        env = volumes.container_env(self.cluster, self.pod, c, node)
        argv = [volumes.expand(a, env) for a in (c.get("command") or []) + (c.get("args") or [])]
        if not c.get("command"):
            raise volumes.NotReady(
                "CreateContainerError",
                "the fake kubelet needs a command: it "
                f"cannot know the entrypoint of image {c.get('image')!r}",
            )
        mounts = [
            [
                str(vols[m["name"]] / m["subPath"]) if m.get("subPath") else str(vols[m["name"]]),
                m["mountPath"],
                bool(m.get("readOnly")),
            ]
            for m in c.get("volumeMounts") or []
        ]
        mounts += self._image_files(c)
        account = self.cluster.in_cluster.service_account_volume(
            self.pod, self.dir / "serviceaccount" / c["name"]
        )
        if account is not None:  # where /var/run leads, as a runtime resolves a mount's path
            mounts.append(
                [str(account), os.path.realpath("/var/run") + MOUNT.removeprefix("/var/run"), True]
            )
        mounts.append([str(self.hosts), "/etc/hosts", False])
        term = self.dir / f"{c['name']}.termination-log"
        term.write_bytes(b"")
        mounts.append([str(term), c.get("terminationMessagePath") or "/dev/termination-log", False])
        root = self.dir / "root" / c["name"]
        root.mkdir(parents=True, exist_ok=True)
        plan = self.dir / f"{c['name']}.plan.json"
        plan.write_text(
            json.dumps(
                {
                    "root": str(root),
                    "mounts": mounts,
                    "argv": argv,
                    "workdir": c.get("workingDir"),
                    "hostname": env["HOSTNAME"],
                }
            )
        )
        env[MARKER] = self.marker(c["name"])
        # A container's /tmp is its own: what its commands leave there (torchrun's
        # torchelastic_* folders) goes with the pod's files, not into the host's /tmp.
        scratch = self.dir / "tmp" / c["name"]
        scratch.mkdir(parents=True, exist_ok=True)
        env.setdefault("TMPDIR", str(scratch))
        # With pod networks a container also has a PID namespace of its own, as a real one:
        # its command is PID 1 (/proc/1/fd/1 is its log) and the rest dies with it.
        network = self.kubelet.network
        isolate = (
            ["nsenter", f"--net=/run/netns/{network.netns(self.pod['metadata']['uid'])}"]
            if network
            else []
        )
        pid_ns = ["--pid", "--fork", "--mount-proc"] if network else []
        with open(self.dir / f"{c['name']}.log", "ab") as log:
            return subprocess.Popen(
                [
                    *isolate,
                    "unshare",
                    "--mount",
                    "--uts",
                    *pid_ns,
                    "--propagation",
                    "private",
                    "--",
                    sys.executable,
                    "-I",
                    "-S",
                    PODINIT,
                    str(plan),
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def _image_files(self, c) -> list[list]:
        """Read-only mounts of the files the container's image adds (FakeCluster's images)."""
        mounts = []
        for i, (path, text) in enumerate(
            sorted(self.cluster.images.get(c.get("image"), {}).items())
        ):
            src = self.dir / "image" / c["name"] / str(i)
            src.parent.mkdir(parents=True, exist_ok=True)
            src.write_text(text)
            mounts.append([str(src), path, True])
        return mounts

    def _launch(self, c, vols, node, main):
        """Start one container instance: (container, process, startedAt), or None if stopped."""
        name = c["name"]
        log = self.dir / f"{name}.log"
        if self.restarts.get(name) and log.exists():
            log.unlink()  # the instance before is kept as .previous by _back_off
        proc = self._wait_ready(lambda: self._start(c, vols, node))
        if proc is None:
            return None
        self._note_mount_ns(proc, name)
        started = now()
        self.generation[name] = self.generation.get(name, 0) + 1
        self.ended.discard(name)
        self.statuses[name] = self._cstatus(
            c, {"running": {"startedAt": started}}, containerID=f"fake://{proc.pid}", ready=main
        )
        self.cluster.event(
            self.pod,
            "Normal",
            "Pulled",
            f'Container image "{c.get("image")}" already present on machine',
            "kubelet",
        )
        self.cluster.event(self.pod, "Normal", "Created", f"Created container: {name}", "kubelet")
        self.cluster.event(self.pod, "Normal", "Started", f"Started container {name}", "kubelet")
        return c, proc, started

    def _note_mount_ns(self, proc, name):
        """Remember the container's mount namespace once unshare has made it."""
        own = mount_ns(os.getpid())
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and proc.poll() is None:
            ns = mount_ns(proc.pid)
            if ns and ns != own:
                MOUNT_NS[ns] = self.marker(name)
                return
            time.sleep(0.01)

    def _back_off(self, c) -> bool:
        """Wait before restarting a container in place (CrashLoopBackOff); False if stopped."""
        name, meta = c["name"], self.pod["metadata"]
        log = self.dir / f"{name}.log"
        if log.exists():
            shutil.copyfile(log, self.dir / f"{name}.log.previous")
        self.restarts[name] = self.restarts.get(name, 0) + 1
        self.last_state[name] = self.statuses[name]["state"]["terminated"]
        delay = min(
            self.cluster.restart_backoff * 2 ** (self.restarts[name] - 1),
            self.cluster.restart_backoff * 30,
        )
        self.statuses[name] = self._cstatus(
            c,
            {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {delay:g}s restarting failed "
                    f"container={name} pod={meta['name']}_{meta['namespace']}({meta['uid']})",
                }
            },
        )
        # The event before the status: a Job controller that sees this restart count (and
        # fails the Job at its backoffLimit) finds the restart's BackOff event already there.
        self.cluster.event(
            self.pod,
            "Warning",
            "BackOff",
            f"Back-off restarting failed container "
            f"{name} in pod {meta['name']}_{meta['namespace']}({meta['uid']})",
            "kubelet",
        )
        self._publish(ready=False, initialized=True)
        return not self.stopped.wait(delay)

    def _run_containers(self, containers, vols, main=False):
        """Exit codes of ``containers`` run side by side (restarted in place as the pod's
        restartPolicy says); None when the pod was stopped first."""
        node = self.cluster.store.get(self.kubelet.node_res, None, NODE)
        policy = self.pod["spec"].get("restartPolicy", "Always")
        procs = {}
        for c in containers:
            launched = self._launch(c, vols, node, main)
            if launched is None:
                for _, p, _ in procs.values():
                    self._kill(p, 0)
                return None
            procs[c["name"]] = launched
        self._publish("Running" if main else None, ready=main, initialized=main)
        codes = {}
        while len(codes) < len(procs):
            if self.stopped.is_set():
                for name, (c, proc, _) in procs.items():
                    if name not in codes:
                        self.cluster.event(
                            self.pod, "Normal", "Killing", f"Stopping container {name}", "kubelet"
                        )
                        codes[name] = self._kill(proc, self.grace or 0, name)
                        self._terminated(c, codes[name], procs[name][2])
                return None
            for name, (c, proc, started) in list(procs.items()):
                if name in codes or (proc.poll() is not None and name in self.ended):
                    continue
                if proc.poll() is None:
                    continue
                code = self._exit_code(proc.returncode)
                signal_marker(self.marker(name), signal.SIGKILL)  # the rest of the container
                forget_mount_ns(self.marker(name))  # its number may go to another's namespace
                self._terminated(c, code, started)
                if main and (policy == "Always" or (policy == "OnFailure" and code != 0)):
                    if self._back_off(c):
                        relaunched = self._launch(c, vols, node, main)
                        if relaunched is not None:
                            procs[name] = relaunched
                            self._publish(ready=True, initialized=True)
                    continue
                codes[name] = code
                if main and len(codes) < len(procs):
                    self._publish(ready=False, initialized=True)
            self.stopped.wait(0.05)
        return [codes[c["name"]] for c in containers]

    @staticmethod
    def _exit_code(rc):
        return 128 - rc if rc < 0 else rc

    def _message(self, c, code) -> str | None:
        """The termination message, as the kubelet reads it: the container's message file, or
        with FallbackToLogsOnError after a failure the end of its log (80 lines, 2 KiB)."""
        term = self.dir / f"{c['name']}.termination-log"
        text = term.read_bytes()[:4096] if term.exists() else b""
        if not text and code != 0 and c.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            text = b"".join((self.dir / f"{c['name']}.log").read_bytes().splitlines(True)[-80:])[
                -2048:
            ]
        return text.decode(errors="replace") or None

    def _terminated(self, c, code, started):
        self.ended.add(c["name"])
        state = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": started,
            "finishedAt": now(),
            "containerID": f"fake://{c['name']}",
        }
        message = self._message(c, code)
        if message:
            state["message"] = message
        self.statuses[c["name"]] = self._cstatus(c, {"terminated": state})

    def _kill(self, proc, grace, name=None):
        prefix = self.marker(name) if name else self.marker("")
        # In a PID namespace of its own, proc is unshare, which waits for the container's PID 1.
        signal_marker(prefix, signal.SIGTERM, skip=proc.pid if self.kubelet.network else None)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and live_pids(prefix):
            time.sleep(0.05)
        signal_marker(prefix, signal.SIGKILL)
        proc.wait()
        while live_pids(prefix):
            time.sleep(0.02)
        return self._exit_code(proc.returncode)
