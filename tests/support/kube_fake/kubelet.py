"""The kubelet of the one fake node: binds pods the scheduler lets through, and runs each pod
(podrun.py); it also stops pods and streams their logs."""

from __future__ import annotations

import glob
import shutil
import signal
import tempfile
import time
from pathlib import Path

from . import scheduler, volumes
from .markers import live_pids, signal_marker
from .network import PodNetwork
from .podrun import PodRun, pod_condition
from .scheduler import NODE
from .store import ApiError


class Kubelet:
    def __init__(self, cluster):
        self.cluster = cluster
        reg = cluster.registry
        self.pod_res = reg.find("", "v1", "pods")
        self.node_res = reg.find("", "v1", "nodes")
        self.svc_res = reg.find("", "v1", "services")
        self.runs: dict[str, PodRun] = {}
        self.hostnames: set[str] = set()  # of every pod started, for stop_all's cleanup
        self.unschedulable: dict[str, str] = {}
        self.root = cluster.root / "kubelet"
        self.network = PodNetwork(cluster.token) if cluster.pod_network else None

    def pod_ip(self, uid: str) -> str:
        return (self.network.ip(uid) if self.network else None) or "127.0.0.1"

    # -- the control loop's part
    def sync(self):
        store = self.cluster.store
        pods = sorted(
            store.list(self.pod_res)[0],
            key=lambda p: (
                int(p["metadata"]["resourceVersion"]) if not p["spec"].get("nodeName") else 0
            ),
        )
        node = store.get(self.node_res, None, NODE)
        services = store.list(self.svc_res)[0]
        live = set()
        for pod in pods:
            meta = pod["metadata"]
            live.add(meta["uid"])
            run = self.runs.get(meta["uid"])
            if meta.get("deletionTimestamp"):
                if run and not run.done.is_set():
                    run.stop(
                        meta.get(
                            "deletionGracePeriodSeconds",
                            pod["spec"].get("terminationGracePeriodSeconds", 30),
                        )
                    )
                else:
                    self._forget(pod)
                continue
            if not pod["spec"].get("nodeName"):
                self._schedule(pod, node, pods)
            elif run is None and pod["status"].get("phase") == "Pending":
                run = self.runs[meta["uid"]] = PodRun(self, pod)
                self.hostnames.add(pod["spec"].get("hostname") or meta["name"][:63])
                if self.network:
                    self.network.netns(meta["uid"])
                run.write_hosts(volumes.hosts_file(self.cluster, pod, pods, services, self.pod_ip))
                run.start()
                continue
            if run is not None:
                run.write_hosts(volumes.hosts_file(self.cluster, pod, pods, services, self.pod_ip))
        for uid in [u for u in self.runs if u not in live]:
            self.runs.pop(uid).stop(0)

    def _forget(self, pod):
        try:
            self.cluster.store.remove(
                self.pod_res, pod["metadata"]["namespace"], pod["metadata"]["name"]
            )
        except ApiError:
            pass
        self.runs.pop(pod["metadata"]["uid"], None)

    def _schedule(self, pod, node, pods):
        bound = [
            p
            for p in pods
            if p["spec"].get("nodeName") == NODE
            and p["status"].get("phase") not in ("Succeeded", "Failed")
        ]
        message = scheduler.fits(node, pod, bound)
        meta = pod["metadata"]
        if message:
            if self.unschedulable.get(meta["uid"]) != message:
                self.unschedulable[meta["uid"]] = message
                self.cluster.event(pod, "Warning", "FailedScheduling", message, "default-scheduler")

                def pending(obj):
                    obj["status"]["conditions"] = [
                        pod_condition("PodScheduled", "False", "Unschedulable", message)
                    ]

                self.cluster.store.mutate(self.pod_res, meta["namespace"], meta["name"], pending)
            return
        self.unschedulable.pop(meta["uid"], None)

        def bind(obj):
            obj["spec"]["nodeName"] = NODE
            obj["status"]["conditions"] = [pod_condition("PodScheduled", "True")]

        self.cluster.store.mutate(self.pod_res, meta["namespace"], meta["name"], bind)
        self.cluster.event(
            pod,
            "Normal",
            "Scheduled",
            f"Successfully assigned {meta['namespace']}/{meta['name']} to {NODE}",
            "default-scheduler",
        )

    # -- the API's part
    def delete_pod(self, ns, name, grace):
        store = self.cluster.store
        pod = store.get(self.pod_res, ns, name)
        run = self.runs.get(pod["metadata"]["uid"])
        if run is None or run.done.is_set():
            return store.remove(self.pod_res, ns, name)
        grace = pod["spec"].get("terminationGracePeriodSeconds", 30) if grace is None else grace
        out = store.mark_deleted(self.pod_res, ns, name, grace=grace, keep=True)
        run.stop(grace)
        return out

    def log_stream(self, ns, name, query):
        pod = self.cluster.store.get(self.pod_res, ns, name)
        names = [c["name"] for c in pod["spec"]["containers"]]
        inits = [c["name"] for c in pod["spec"].get("initContainers") or []]
        cname = query.get("container")
        if not cname:
            if len(names) != 1:
                extra = f" or one of the init containers: [{' '.join(inits)}]" if inits else ""
                raise ApiError(
                    400,
                    "BadRequest",
                    f"a container name must be specified for pod "
                    f"{name}, choose one of: [{' '.join(names)}]{extra}",
                )
            cname = names[0]
        if cname not in names + inits:
            raise ApiError(400, "BadRequest", f"container {cname} is not valid for pod {name}")
        run = self.runs.get(pod["metadata"]["uid"])
        previous = query.get("previous") in ("true", "1")
        path = run.log_path(cname, previous) if run else None
        if previous and path is None:
            raise ApiError(
                400,
                "BadRequest",
                f'previous terminated container "{cname}" in pod "{name}" not found',
            )
        if path is None:
            waiting = "PodInitializing" if cname in names and inits else "ContainerCreating"
            raise ApiError(
                400,
                "BadRequest",
                f'container "{cname}" in pod "{name}" is waiting to start: {waiting}',
            )
        follow = query.get("follow") in ("true", "1") and not previous
        return self._follow(run, cname, path, follow, query.get("tailLines"))

    def _follow(self, run, cname, path, follow, tail):
        generation = run.generation.get(cname)
        yield b""
        with open(path, "rb") as f:
            if tail is not None:
                yield (
                    b"".join(f.read().splitlines(keepends=True)[-int(tail) :]) if int(tail) else b""
                )
            while True:
                finished = run.finished(cname, generation) or self.cluster.stopping
                data = f.read(65536)
                if data:
                    yield data
                    continue
                if not follow or finished:
                    return
                time.sleep(0.05)

    def processes(self) -> list[dict]:
        out = []
        for pid, marker in sorted(live_pids(self.cluster.token + "/").items()):
            _, ns, pod, container = marker.rstrip("/").split("/", 3)
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            out.append(
                {
                    "pid": pid,
                    "namespace": ns,
                    "pod": pod,
                    "container": container,
                    "cmdline": [c.decode(errors="replace") for c in cmd if c],
                }
            )
        return out

    def stop_all(self):
        for run in list(self.runs.values()):
            run.stop(0)
        for run in list(self.runs.values()):
            run.join(10)
        signal_marker(self.cluster.token + "/", signal.SIGKILL)
        if self.network:
            self.network.close()
        # Open MPI's session folders: a pod's /tmp is this machine's, as its other folders
        # are, so what mpirun and orted left there by the pod's hostname is removed here.
        for host in self.hostnames:
            for left in Path(tempfile.gettempdir()).glob(f"ompi.{glob.escape(host)}.*"):
                shutil.rmtree(left, ignore_errors=True)
