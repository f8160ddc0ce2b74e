"""FakeCluster: the fake API server, its controllers and its kubelet, on 127.0.0.1."""

from __future__ import annotations

import threading
import traceback
import uuid
from pathlib import Path

import yaml

from jupyter_trainer.rankside.host import procs

from . import admission
from .gc import GarbageCollector
from .incluster import InClusterApi
from .jobs import JobController
from .kubelet import Kubelet
from .kueue import KueueController
from .resources import Registry
from .scheduler import NODE
from .server import ApiServer
from .store import ApiError, Store, now
from .trainer import TrainJobController, load_runtime
from .validation import K8S_DIR, validate_object

DEFAULT_ALLOCATABLE = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "0"}


free_port = procs.free_port


class FakeCluster:
    """A one-node Kubernetes cluster whose pods are local processes.

    ``trainjob_api`` installs the Kubeflow Trainer v2 API (TrainJob, ClusterTrainingRuntime) with
    the ``torch-distributed`` runtime; ``allocatable`` is the node's capacity (quantities as in
    Kubernetes; a resource not named there is 0). ``master_port`` is given to TrainJob pods as
    PET_MASTER_PORT (the real Trainer uses 29400; the default here is a free port per TrainJob,
    so that clusters running side by side on one host do not collide). A container restarted in
    place (restartPolicy OnFailure or Always) waits ``restart_backoff`` seconds, doubling per
    restart up to 30 times that (the kubelet's CrashLoopBackOff starts at 10 s, capped at 5 min).
    With the Trainer API the ``mpi-distributed`` runtime is installed too. ``pod_network`` gives
    each pod a network namespace of its own (network.py) and each container a PID namespace;
    ``images`` maps an image name to the files it adds (images.py). ``kueue`` installs
    Kueue (kueue.py) with a LocalQueue per key, admitting at most that many CPUs at once.
    """

    def __init__(
        self,
        tmp_path,
        *,
        trainjob_api: bool = False,
        allocatable: dict | None = None,
        master_port: int | None = None,
        namespace: str = "default",
        restart_backoff: float = 0.2,
        pod_network: bool = False,
        images: dict[str, dict[str, str]] | None = None,
        kueue: dict[str, str] | None = None,
    ):
        self.restart_backoff = restart_backoff
        self.pod_network = pod_network
        self.images = images or {}
        self.root = Path(tmp_path) / "kube-fake"
        self.root.mkdir(parents=True, exist_ok=True)
        self.token = uuid.uuid4().hex
        self.namespace = namespace
        self.registry = Registry(trainjob_api, kueue=bool(kueue))
        self.store = Store()
        self.stopping = False
        self.errors: list[str] = []
        self._wake = threading.Event()
        self.store.listeners.append(self._wake.set)
        self.allocatable = {**DEFAULT_ALLOCATABLE, **(allocatable or {})}
        self._ports: dict[str, int] = {}
        self.kubelet = Kubelet(self)
        self.gc = GarbageCollector(self)
        self.jobs = JobController(self)
        self.trainjobs = TrainJobController(self, lambda tj: master_port or self._port(tj))
        self.kueue = KueueController(self, kueue) if kueue else None
        self.server = ApiServer(self)
        self.port = self.server.port
        self.url = f"http://127.0.0.1:{self.port}"
        self.in_cluster = InClusterApi(self)  # what pods reach: TLS and their own tokens
        self.kubeconfig = self.root / "kubeconfig"
        self._loop = threading.Thread(target=self._run, name="kube-fake-controllers", daemon=True)
        self._seed(namespace, trainjob_api)

    def _port(self, tj) -> int:
        return self._ports.setdefault(tj["metadata"]["uid"], free_port())

    def _seed(self, namespace, trainjob_api):
        ns_res = self.registry.find("", "v1", "namespaces")
        for ns in dict.fromkeys(["default", "kube-system", namespace]):
            self.create(ns_res, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": NODE,
                "labels": {
                    "kubernetes.io/hostname": NODE,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                },
            },
            "spec": {},
            "status": {
                "capacity": dict(self.allocatable),
                "allocatable": dict(self.allocatable),
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "lastTransitionTime": now(),
                    }
                ],
            },
        }
        self.store.create(self.registry.find("", "v1", "nodes"), node)
        sa_res = self.registry.find("", "v1", "serviceaccounts")
        for ns in dict.fromkeys(["default", namespace]):
            self.create(
                sa_res,
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": "default", "namespace": ns},
                },
            )
        if trainjob_api:
            for runtime in ("torch-distributed-runtime.yaml", "mpi-distributed-runtime.yaml"):
                self.create(
                    self.registry.find(
                        "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes"
                    ),
                    load_runtime(K8S_DIR / runtime),
                )

    # -- used by the server and the controllers
    def admit(self, res, obj):
        admission.admit(self, res, obj)

    def create(self, res, obj: dict) -> dict:
        """Create as the API server would for a client (defaults, validation)."""
        obj.setdefault("metadata", {})
        if res.namespaced:
            obj["metadata"].setdefault("namespace", self.namespace)
        self.admit(res, obj)
        validate_object(res, obj)
        return self.store.create(res, obj)

    def delete(self, res, ns, name, policy=None, grace=None) -> dict:
        out = self.gc.delete(res, ns, name, policy, grace)
        self.wake()
        return out

    def event(self, obj: dict, type_: str, reason: str, message: str, component: str):
        meta = obj["metadata"]
        ns = meta.get("namespace") or "default"
        t = now()
        try:
            self.store.create(
                self.registry.find("", "v1", "events"),
                {
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {
                        "name": f"{meta['name']}.{uuid.uuid4().hex[:16]}",
                        "namespace": ns,
                    },
                    "involvedObject": {
                        "apiVersion": obj.get("apiVersion"),
                        "kind": obj.get("kind"),
                        "name": meta["name"],
                        "namespace": meta.get("namespace"),
                        "uid": meta.get("uid"),
                        "resourceVersion": meta.get("resourceVersion"),
                    },
                    "reason": reason,
                    "message": message,
                    "type": type_,
                    "count": 1,
                    "source": {
                        "component": component,
                        **({"host": NODE} if component == "kubelet" else {}),
                    },
                    "firstTimestamp": t,
                    "lastTimestamp": t,
                    "eventTime": None,
                    "reportingComponent": component,
                    "reportingInstance": NODE if component == "kubelet" else "",
                },
            )
        except ApiError:
            pass

    def wake(self):
        self._wake.set()

    def _run(self):
        while not self.stopping:
            self._wake.wait(0.2)
            self._wake.clear()
            if self.stopping:
                break
            steps = (self.trainjobs.sync, self.jobs.sync, self.gc.sync, self.kubelet.sync)
            for step in ((self.kueue.sync,) if self.kueue else ()) + steps:
                try:
                    step()
                except Exception:  # keep the loop alive; tests see the fault in .errors
                    self.errors.append(traceback.format_exc())

    # -- for tests
    def processes(self) -> list[dict]:
        """Every live process of every pod: pid, namespace, pod, container, cmdline."""
        return self.kubelet.processes()

    def pids(self) -> set[int]:
        return {p["pid"] for p in self.processes()}

    def write_kubeconfig(self):
        self.kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "fake",
                    "preferences": {},
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "fake", "user": {"token": "fake-token"}}],
                    "contexts": [
                        {
                            "name": "fake",
                            "context": {
                                "cluster": "fake",
                                "user": "fake",
                                "namespace": self.namespace,
                            },
                        }
                    ],
                }
            )
        )

    def start(self) -> FakeCluster:
        self.write_kubeconfig()
        self.server.start()
        self.in_cluster.start()
        self._loop.start()
        return self

    def stop(self):
        self.stopping = True
        self._wake.set()
        with self.store.cond:
            self.store.closed = True
            self.store.cond.notify_all()
        self._loop.join(10)
        self.kubelet.stop_all()
        self.server.stop()
        self.in_cluster.stop()

    def __enter__(self) -> FakeCluster:
        return self.start()

    def __exit__(self, *exc):
        self.stop()
