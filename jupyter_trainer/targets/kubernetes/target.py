"""The kubernetes target: a run is a Kubeflow Trainer ``TrainJob`` or an Indexed Job with a
headless Service (manifests.py), created through lightkube (cluster.py), never kubectl.

``plan`` decides the API (``api = "auto"``: a TrainJob when the cluster serves them) and
packs the snapshot; ``command`` is the launcher from the launcher table; ``dry_run`` prints
the manifests ``start`` would create (with ``api = "auto"`` and a cluster that cannot be asked,
both ways: dry_run.py). While the run goes, ``phase`` says ``queued`` with the
scheduler's reason as long as a pod is Pending, ``sync`` follows every pod's log (marked
lines become the run folder's logs, events and rank records; the rest is the pod's launcher
log), and ``poll`` reads the Job's or TrainJob's conditions (status.py reads what the
objects say). ``stop`` deletes everything with foreground propagation and waits until no pod
of the run is left.
"""

from __future__ import annotations

import os
import shutil
import stat
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...core.errors import TargetError
from ...core.files import current_umask
from ...core.spec import RunSpec
from ...launchers.table import Command, LaunchPlan
from ...nodes.mirror import LocalFiles
from ..base import Handle, Target, refuse_ranks_beyond_gpus
from .cluster import Cluster, require_lightkube
from .config import KubeConfig
from .dry_run import DryApis, dry_apis, dry_run_text
from .manifests import (
    MPI_LAUNCHERS,
    PVC_DIR,
    RunObjects,
    check_launch,
    check_snapshot_size,
    launcher_command,
    manifests,
    pod_plan,
    spec_json,
)
from .manifests import run_dir as pod_run_dir
from .names import RUN_ID_LABEL, label_value, object_name
from .run_secret import secrets_json
from .session import KubeSessionRelay, is_session
from .status import (
    MAIN_KIND,
    describe_pod,
    first_failure,
    job_state,
    kueue_waiting,
    node_number,
    pending_reason,
    pod_labels,
    waiting_reason,
)
from .stream import PodLog, follow

STOP_SETTLE_S = 30.0  # after the grace: how long deleted pods get to be gone
FOLLOW_TRIES = 20
PODS_TTL_S = 0.5
FOLLOW_END_S = 15.0  # how long the pods' log streams get to reach their end


class KubernetesTarget(Target):
    kind = "kubernetes"
    queues = True
    runs_images = True

    def __init__(self, name: str, config: Mapping[str, Any] | None = None) -> None:
        super().__init__(name, config)
        self.cfg = KubeConfig.from_config(name, self.config)
        self._cluster: Cluster | None = None
        self._pending: dict[str, Any] = {}
        self._files: LocalFiles | None = None
        self._followers: dict[str, threading.Thread] = {}
        self._final: dict[str, Any] | None = None
        self._seen_pods: tuple[float, list[dict[str, Any]]] = (-PODS_TTL_S, [])
        self._deleting = False  # stop() deletes the run's objects: their absence is ours
        self._dry: DryApis | None = None
        self._relay: KubeSessionRelay | None = None

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            self._cluster = Cluster(self.cfg, self.name)
        return self._cluster

    def gpus_per_node(self) -> int:
        return self.cfg.gpus_per_node

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "kubeconfig": str(self.cfg.kubeconfig_path()),
            "context": self.cfg.context,
            "namespace": self.cfg.namespace,
            "api": self.cfg.api,
            "image": self.cfg.image,
            "gpus_per_node": self.cfg.gpus_per_node,
            "runtime": self.cfg.runtime,
            "workdir_pvc": self.cfg.workdir_pvc,
        }

    # -- submit side -------------------------------------------------------------------
    def image(self, spec: RunSpec) -> str:
        image = self.cfg.image or spec.env.image
        if not image:
            raise TargetError(
                f"target {self.name!r} needs a container image for the pods: set "
                'image = "REPO:TAG" in the target, or `image:` in the run\'s '
                "environment (%%environment)"
            )
        return image

    def check(self, spec: RunSpec) -> None:
        refuse_ranks_beyond_gpus(self, spec.launch, "each node has (gpus_per_node)")
        require_lightkube()
        self.image(spec)
        if self.cfg.api != "auto":
            check_launch(spec, self.cfg.api)
        if spec.data:
            raise TargetError(
                f"--data inputs need the run folders on a shared volume: set "
                f'workdir_pvc = "CLAIM" in target {self.name!r} and put the data '
                "there (staging --data onto it is not supported yet)"
                if not self.cfg.workdir_pvc
                else "--data inputs are not staged onto workdir_pvc yet; read the data "
                "from the claim's own path in the training code instead"
            )
        if spec.lineage.get("checkpoint") and not (self.cfg.workdir_pvc and self.cfg.workdir_local):
            raise TargetError(self._no_shared_volume())

    def _no_shared_volume(self) -> str:
        return (
            f"this run resumes from a checkpoint, which target {self.name!r} can only hand to "
            'its pods on a shared volume: set workdir_pvc = "CLAIM" (a ReadWriteMany claim) '
            'and workdir_local = "PATH" (where this machine mounts it) in the target, or '
            "resume on another target"
        )

    # -- supervisor side ---------------------------------------------------------------
    def warm_up(self) -> None:
        try:
            import lightkube  # noqa: F401 (the supervisor waits for its run anyway)
            from lightkube.resources import batch_v1, core_v1  # noqa: F401
        except ImportError:
            pass  # check() already refused the run

    def api(self) -> str:
        """``trainjob`` or ``job``: the setting, or (auto) what the cluster serves."""
        if self.cfg.api != "auto":
            return self.cfg.api
        return "trainjob" if self.cluster.serves_trainjobs() else "job"

    def namespace(self) -> str:
        if self.cfg.namespace:
            return self.cfg.namespace
        try:
            return self.cluster.namespace
        except TargetError:
            return "default"  # no kubeconfig: what kubectl apply would use

    def plan(self, spec: RunSpec, run_id: str, run_dir: str, backend: str) -> LaunchPlan:
        return self._plan(spec, run_id, run_dir, backend, self.api())

    def dry_plan(self, spec: RunSpec, run_id: str, run_dir: str, backend: str) -> LaunchPlan:
        """``plan`` with the API a dry run shows first: with ``api = "auto"`` and a cluster
        that cannot be asked, the run is shown both ways (dry_run.py)."""
        self._dry = dry_apis(self.cfg.api, self.api, spec)
        return self._plan(spec, run_id, run_dir, backend, self._dry.apis[0])

    def _plan(self, spec: RunSpec, run_id: str, run_dir: str, backend: str, api: str) -> LaunchPlan:
        from ...nodes.prepare import snapshot_tarball

        check_launch(spec, api)
        code = Path(run_dir) / "code"
        if not code.is_dir():
            raise TargetError(f"the run's snapshot {code} is missing")
        snapshot = snapshot_tarball(code)
        written = Path(run_dir) / "spec.json"
        self._pending = {
            "spec": spec,
            "run_id": run_id,
            "api": api,
            "namespace": self.namespace(),
            "image": self.image(spec),
            "snapshot": snapshot if check_snapshot_size(snapshot, self.cfg) else None,
            "spec_json": written.read_text() if written.exists() else spec_json(spec),
            "secrets_json": secrets_json(spec, run_dir),
            "session": is_session(spec, run_dir),
        }
        return pod_plan(spec, run_id, self.cfg, api, backend)

    def stage(self, spec: RunSpec, plan: LaunchPlan, run_dir: str) -> None:
        """A resumed run's checkpoint, and a snapshot too large for the ConfigMap: written
        into the run's folder on workdir_pvc, through the path where this machine mounts it."""
        self._seed_checkpoint(plan, run_dir)
        if not self._pending or self._pending["snapshot"] is not None:
            return
        dest = local_claim_path(self.cfg, plan.run_dir) / "code"
        copied = copy_tree(Path(run_dir) / "code", dest.with_name("code.staging"))
        if "error" in copied:
            raise TargetError(f"cannot stage the snapshot onto workdir_pvc: {copied['error']}")
        try:
            os.replace(dest.with_name("code.staging"), dest)
        except OSError as exc:
            raise TargetError(
                f"cannot stage the snapshot onto workdir_pvc at {dest}: {exc} "
                "(a run folder of that run id is there already?)"
            ) from None
        self.on_staging({"snapshot": {"to": str(dest), "files": copied["files"]}, "done": True})

    def _seed_checkpoint(self, plan: LaunchPlan, run_dir: str) -> None:
        """The checkpoint ``resume`` put in the run's folder (``Store.seed_checkpoint``), onto
        workdir_pvc where the ranks look for it; a pod's own emptyDir cannot be reached."""
        seeded = Path(run_dir) / "checkpoints"
        if not seeded.is_dir() or not any(p.is_file() for p in seeded.rglob("*")):
            return
        if not (self.cfg.workdir_pvc and self.cfg.workdir_local):
            raise TargetError(self._no_shared_volume())
        dest = local_claim_path(self.cfg, plan.run_dir) / "checkpoints"
        copied = copy_tree(seeded, dest)
        if "error" in copied:
            raise TargetError(f"cannot put the checkpoint onto workdir_pvc: {copied['error']}")
        self.on_staging({"checkpoint": {"to": str(dest), "files": copied["files"]}})

    def command(self, spec: RunSpec, plan: LaunchPlan) -> Command:
        return launcher_command(spec, plan, self._pending.get("api") or self.api())

    def objects(self, command: Command) -> RunObjects:
        if not self._pending:
            raise TargetError("the kubernetes target has no planned run: call plan() first")
        return RunObjects(cfg=self.cfg, command=command, **self._pending)

    def dry_run(self, spec: RunSpec, plan: LaunchPlan, command: Command) -> str:
        """Every object the run would create, as a multi-document YAML stream that
        ``kubectl apply -f -`` takes (both APIs' where ``dry_plan`` could not tell which)."""
        apis = self._dry.apis if self._dry else (self._pending.get("api") or self.api(),)
        return dry_run_text(self.objects(command), spec, plan, apis)

    def dry_run_parts(self, spec: RunSpec, plan: LaunchPlan, command: Command) -> dict[str, Any]:
        return {"notes": list(self._dry.notes)} if self._dry else {}

    def start(self, command: Command, run_dir: str, log_path: str) -> Handle:
        objects = self.objects(command)
        self._files = LocalFiles(run_dir)
        self._deleting = False
        created: list[tuple[str, str]] = []
        try:
            for manifest in manifests(objects):
                self.cluster.create(manifest)
                created.append((manifest["kind"], manifest["metadata"]["name"]))
        except TargetError:
            for kind, name in reversed(created):
                try:
                    self.cluster.delete(kind, name, 0)
                except TargetError:
                    pass
            raise
        return {
            "target": self.name,
            "kind": self.kind,
            "api": objects.api,
            "namespace": objects.namespace,
            "name": objects.name,
            "objects": [f"{kind}/{name}" for kind, name in created],
            "run_dir_remote": pod_run_dir(self.cfg, objects.run_id),
            "mpi": (objects.api == "trainjob" and objects.spec.launch.launcher in MPI_LAUNCHERS),
            "labels": pod_labels(objects.api, objects.run_id),
            "selector": f"{RUN_ID_LABEL}={label_value(objects.run_id)}",
        }

    # -- while it runs -----------------------------------------------------------------
    def _pods(self, handle: Handle, fresh: bool = False) -> list[dict[str, Any]]:
        """The run's pods, asked at most every PODS_TTL_S (phase, sync and poll all look)."""
        asked, pods = self._seen_pods
        if fresh or time.monotonic() - asked >= PODS_TTL_S:
            pods = self.cluster.pods(dict(handle["labels"]))
            self._seen_pods = (time.monotonic(), pods)
        return pods

    def phase(self, handle: Handle) -> dict[str, Any]:
        pods = self._pods(handle)
        if not pods:
            waiting = {"stage": "queued", "reason": self._waiting_reason(handle)}
            if self.cfg.queue:
                main = MAIN_KIND[handle["api"]]
                waiting.update(
                    kueue_waiting(
                        self.cfg.queue,
                        self.cluster.workload(main, handle["name"]),
                        self.cluster.pending_workloads(self.cfg.queue),
                    )
                )
            return waiting
        pending = [p for p in pods if (p.get("status") or {}).get("phase") == "Pending"]
        if not pending:
            return {"stage": "running", "pods": len(pods)}
        return {
            "stage": "queued",
            "pods": len(pods),
            "pending": len(pending),
            "reason": self.pending_reason(pending[0]),
        }

    def _waiting_reason(self, handle: Handle) -> str:
        main = MAIN_KIND[handle["api"]]
        return waiting_reason(main, handle["name"], self.cluster.get(main, handle["name"]))

    def pending_reason(self, pod: dict[str, Any]) -> str:
        return pending_reason(pod, self.cluster.events)

    def sync(self, handle: Handle) -> None:
        """Each started pod's log into the run folder; a session's requests to the pods."""
        if self._files is None:
            return
        if self._pending.get("session"):
            if self._relay is None:
                world = self._pending["spec"].launch.world_size
                root, run_id = str(self._files.root), self._pending["run_id"]
                self._relay = KubeSessionRelay(self.cluster, handle, root, run_id, world)
            self._relay.pump()
        for pod in self._pods(handle):
            name = pod["metadata"]["name"]
            phase = (pod.get("status") or {}).get("phase")
            if name in self._followers or phase not in ("Running", "Succeeded", "Failed"):
                continue
            log = PodLog(self._files, node_number(pod, handle.get("mpi", False)), name)
            thread = threading.Thread(
                target=self._follow, args=(name, log), daemon=True, name=f"jt-kube-log-{name}"
            )
            self._followers[name] = thread
            thread.start()

    def _join_followers(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for thread in list(self._followers.values()):
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def _follow(self, pod: str, log: PodLog) -> None:
        follow(self.cluster, pod, log, FOLLOW_TRIES)

    def collect(self, handle: Handle) -> dict[str, Any]:
        """The followers' last lines (the pods have ended), and the outputs: copied from
        workdir_pvc where this machine sees it (``workdir_local``), else where they are."""
        self._join_followers(FOLLOW_END_S)
        report: dict[str, Any] = {"followed_pods": sorted(self._followers)}
        if self._files is not None:
            self._files.flush_partial()
        remote = f"{handle.get('run_dir_remote')}/outputs"
        if not self.cfg.workdir_pvc:
            return {
                **report,
                "outputs": f"{remote} in the pods' emptyDir volumes, gone with "
                "the pods (set workdir_pvc to keep them)",
            }
        report["outputs"] = f"persistentVolumeClaim {self.cfg.workdir_pvc}: {remote}"
        if self.cfg.workdir_local and self._files is not None:
            report["copied"] = copy_tree(
                local_claim_path(self.cfg, remote), self._files.root / "outputs"
            )
            kept = local_claim_path(self.cfg, f"{handle.get('run_dir_remote')}/checkpoints")
            if kept.is_dir():  # what resume starts from, on any target
                report["checkpoints"] = copy_tree(kept, self._files.root / "checkpoints")
        return report

    def poll(self, handle: Handle) -> int | None:
        state = self._state(handle)
        if state["state"] == "running":
            return None
        return state["exit_code"]

    def _state(self, handle: Handle) -> dict[str, Any]:
        """The run's end as the Job's or TrainJob's conditions say, kept once it is final
        (``report`` is asked after ``stop`` deleted the object)."""
        if self._final is not None:
            return self._final
        state = self._conditions(handle)
        if state["state"] in ("completed", "failed", "gone"):
            self._final = state
        return state

    def _conditions(self, handle: Handle) -> dict[str, Any]:
        main = MAIN_KIND[handle["api"]]
        return job_state(
            main,
            handle["name"],
            self.cluster.get(main, handle["name"]),
            self._deleting,
            lambda fresh: first_failure(self._pods(handle, fresh=fresh)),
        )

    def report(self, handle: Handle) -> dict[str, Any]:
        state = self._state(handle)
        report = {"api": handle["api"], "name": handle["name"], **state}
        if state["state"] == "gone":
            report["error"] = (
                f"{state['message']}: it was deleted before the run ended "
                "(kubectl delete, or its namespace went)"
            )
        elif state["state"] == "failed" and "failed_pod" not in state:
            report["error"] = (
                f"Kubernetes ended the {MAIN_KIND[handle['api']]}: "
                f"{state.get('reason')}: {state.get('message')}"
            )
        return report

    def release(self, handle: Handle | None) -> None:
        if self._cluster is not None:
            self._cluster.close()

    # -- the end -----------------------------------------------------------------------
    def _kinds(self, api: str | None) -> tuple[str, ...]:
        """The kinds a run may have created, the main object first (its pods go with it)."""
        if api == "trainjob":
            return ("TrainJob", "ConfigMap", "Secret")
        if api == "job" or self.cfg.api == "job":
            return ("Job", "Service", "ConfigMap", "Secret")
        return ("TrainJob", "Job", "Service", "ConfigMap", "Secret")

    def _run_pods(self, run_id: str) -> list[dict[str, Any]]:
        pods = {
            p["metadata"]["name"]: p
            for api in ("job", "trainjob")
            for p in self.cluster.pods(pod_labels(api, run_id))
        }
        return [p for _, p in sorted(pods.items())]

    def stop(self, handle: Handle, run_id: str, grace: float) -> dict[str, Any]:
        """Delete the run's objects with foreground propagation, then wait (the grace, and
        STOP_SETTLE_S more) until none of them and no pod of the run is left."""
        if self._final is not None:  # ended by itself: read the logs to their end first
            self._join_followers(FOLLOW_END_S)
        self._deleting = True
        api = handle.get("api") or self._pending.get("api")
        items = list(handle.get("objects") or [])
        targets = (
            [tuple(item.split("/", 1)) for item in reversed(items)]
            if items
            else [(kind, object_name(run_id)) for kind in self._kinds(api)]
        )
        deleted = [
            f"{kind}/{name}"
            for kind, name in targets
            if self.cluster.delete(kind, name, int(grace))
        ]
        deadline = time.monotonic() + grace + STOP_SETTLE_S
        while True:
            left = [describe_pod(p) for p in self._run_pods(run_id)]
            left += [
                f"{kind} {name} (being deleted)"
                for kind, name in targets
                if self.cluster.get(kind, name) is not None
            ]
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        self._seen_pods = (-PODS_TTL_S, [])
        return {"deleted": deleted, "propagation": "Foreground", "left": left}

    def leftovers(self, run_id: str) -> list[str]:
        """The run's pods still there, and any of its objects not yet deleted."""
        found = [describe_pod(p) for p in self._run_pods(run_id)]
        name = object_name(run_id)
        for kind in self._kinds(self._pending.get("api")):
            if self.cluster.get(kind, name) is not None:
                found.append(f"{kind} {name} still exists")
        return found


def local_claim_path(cfg: KubeConfig, pod_path: str) -> Path:
    """A path in the pods under workdir_pvc's mount, as this machine sees it."""
    return Path(cfg.workdir_local or "/") / Path(pod_path).relative_to(PVC_DIR)


def copy_tree(src: Path, dest: Path) -> dict[str, Any]:
    """Folders and plain files of ``src`` into ``dest``, between the run folder and the
    claim as this machine sees it. A copy gets its file's mode less this process's umask, as
    if written here (a shared workspace's 027, whatever the pods wrote)."""
    if not src.is_dir():
        return {
            "error": f"{src} is not there (is workdir_local where this machine mounts workdir_pvc?)"
        }
    files, mask = 0, current_umask()
    for path in sorted(src.rglob("*")):
        target = dest / path.relative_to(src)
        if path.is_dir() and not path.is_symlink():
            target.mkdir(parents=True, exist_ok=True)
        elif path.is_file() and not path.is_symlink():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
            os.chmod(target, stat.S_IMODE(os.stat(target).st_mode) & ~mask)
            files += 1
    return {"from": str(src), "files": files}
