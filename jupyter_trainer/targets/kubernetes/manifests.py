"""A run as Kubernetes objects: pure functions from the run's spec, launcher command and
the target's settings to manifests (plain dicts, as ``kubectl apply`` and the API take them).

Two ways to send a run:

- ``trainjob``: one Kubeflow Trainer v2 ``TrainJob`` (``trainer.kubeflow.org/v1alpha1``)
  referencing a ``ClusterTrainingRuntime`` (``torch-distributed`` for torchrun and python;
  the MPI runtime for mpirun and horovod). The Trainer gives each node pod ``PET_NNODES``,
  ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``, ``PET_MASTER_ADDR`` and ``PET_MASTER_PORT``.
- ``job``: an Indexed ``batch/v1`` Job (one pod per node, ``JOB_COMPLETION_INDEX`` its node
  rank) and a headless Service, so pod 0 is reached as ``<job>-0.<service>``: the c10d
  rendezvous endpoint.

Both carry a ``v1`` ConfigMap with the pod program (pod.py), the run's spec.json and, when it
fits, the snapshot as a gzipped tar. spec.json records the run's secret params and variables
redacted; a run that has some carries their values in a ``v1`` Secret of the same name,
mounted owner-only (0400) where pod.py copies it into the run folder for the ranks. Every container command is an argv list: the pod
program, fixed paths, then the launcher's argv from the launcher table (launch.py); no user
value is ever read by a shell.
"""

from __future__ import annotations

import base64
import json
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from ... import rankside
from ...core.errors import TargetError
from ...core.spec import RunSpec
from ...launchers.table import LAUNCHERS, Command, LaunchPlan, Topology, rank_env, rank_program
from . import run_secret
from .config import GPU_RESOURCE, KubeConfig
from .names import QUEUE_LABEL, object_name, run_annotations, run_labels
from .session import access_manifests

TRAINER_API = "trainer.kubeflow.org/v1alpha1"
IN_DIR = "/jt/in"  # the ConfigMap: pod.py, spec.json, snapshot.tar.gz
RUN_DIR = "/jt/run"  # the run folder in a pod, without workdir_pvc (an emptyDir)
PVC_DIR = "/jt/runs"  # where workdir_pvc is mounted; the run folder is <it>/<run id>
RDZV_PORT = 29400
CONTAINER = "node"  # the Trainer's container name, used for the Job's too
MPI_HOSTFILE = "/etc/mpi/hostfile"  # the Trainer's MPI runtime writes the hosts there
# The API server refuses a ConfigMap whose data is over 1 MiB; keep room for the rest.
CONFIGMAP_LIMIT = 1024 * 1024 - 16 * 1024
MPI_LAUNCHERS = ("mpirun", "horovod")


@dataclass(frozen=True)
class RunObjects:
    """What the manifests of one run are built from."""

    spec: RunSpec
    run_id: str
    cfg: KubeConfig
    api: str  # "trainjob" or "job"
    namespace: str
    image: str
    command: Command  # the launcher's, from ``launcher_command``
    snapshot: bytes | None  # the gzipped tar of code/, None when it is on workdir_pvc
    spec_json: str
    secrets_json: str | None = None  # the run's secrets.json, for its Secret; None: none
    session: bool = False  # a live session's: its pods read its request ConfigMaps

    @property
    def name(self) -> str:
        return object_name(self.run_id)


def run_dir(cfg: KubeConfig, run_id: str) -> str:
    """The run folder inside every pod of the run."""
    return posixpath.join(PVC_DIR, run_id) if cfg.workdir_pvc else RUN_DIR


def pod_plan(
    spec: RunSpec,
    run_id: str,
    cfg: KubeConfig,
    api: str,
    backend: str,
    extra_env: Mapping[str, str] | None = None,
) -> LaunchPlan:
    """The LaunchPlan as the pods see it: the image's Python, the in-pod run folder, and
    the address of the first node's pod (``master_addr``), where rank 0 is."""
    folder = run_dir(cfg, run_id)
    return LaunchPlan(
        run_id=run_id,
        run_dir=folder,
        python=cfg.python,
        boot=posixpath.join(folder, "code", "_jt", "boot.py"),
        entry=spec.code.entry,
        args=spec.code.args,
        backend=backend,
        backend_forced=spec.launch.backend is not None,
        master_addr=first_node(spec, run_id, api),
        master_port=RDZV_PORT,
        run_as_root=True,
        oversubscribe=False,
        extra_env={**cfg.env, **(extra_env or {})},
    )


def first_node(spec: RunSpec, run_id: str, api: str) -> str:
    """Node 0's address: this pod on one node; pod 0 of an Indexed Job through its headless
    Service. Empty under a TrainJob: the Trainer gives torchrun's, and under the MPI runtime
    the launcher pod's pod.py takes the first host of the Trainer's hostfile, where mpirun
    puts rank 0 (the launcher pod itself when the runtime runs the launcher as a node)."""
    name = object_name(run_id)
    if spec.launch.nodes == 1:
        return "127.0.0.1"
    if api == "job":
        return f"{name}-0.{name}"
    return ""


def check_launch(spec: RunSpec, api: str) -> None:
    """Raise when ``api`` cannot run the run's launcher on its nodes."""
    launch = spec.launch
    if api == "job" and launch.launcher in MPI_LAUNCHERS and launch.nodes > 1:
        raise TargetError(
            f"--launcher {launch.launcher} on {launch.nodes} nodes needs Kubeflow "
            "Trainer's MPI runtime (its pods reach each other over ssh), which a "
            'plain Job does not give: set api = "trainjob" on a cluster with '
            "Kubeflow Trainer, use --launcher torchrun, or --nodes 1"
        )
    if launch.max_restarts and not launch.restarts_itself:
        raise TargetError(
            f"--max-restarts on the kubernetes target works with --launcher "
            f"torchrun on one node (torchrun restarts its ranks); drop it for "
            f"{launch.nodes} node(s) with {launch.launcher}"
        )


def launcher_command(spec: RunSpec, plan: LaunchPlan, api: str) -> Command:
    """The launcher every pod (or, with MPI, the launcher pod) runs, from the launcher table.

    torchrun finds its node rank and rendezvous in ``PET_*`` variables (pod.py sets them
    from the Job's index or the Trainer's), so every pod runs the same argv. mpirun and
    horovodrun under the Trainer's MPI runtime reach the node pods through its hostfile;
    each rank there first unpacks the snapshot (``pod.py --rank``)."""
    launch = spec.launch
    entry = LAUNCHERS[launch.launcher]
    env = {**plan.extra_env, **rank_env(plan, launch.launcher)}
    if launch.launcher == "torchrun" and api == "job":
        env["PET_RDZV_ENDPOINT"] = f"{plan.master_addr}:{plan.master_port}"
    multi_mpi = api == "trainjob" and launch.launcher in MPI_LAUNCHERS
    topology = Topology(
        rendezvous_known=launch.launcher != "torchrun",
        hostfile=MPI_HOSTFILE if multi_mpi and launch.launcher == "horovod" else None,
    )
    command = entry.command(launch, plan, topology, env)
    if not multi_mpi:
        return command
    argv = list(command.argv)
    ranks = rank_program(plan)
    cut = len(argv) - len(ranks)
    if argv[cut:] != ranks:
        raise TargetError(f"cannot find the rank program in the {launch.launcher} command")
    wrapped = [plan.python, pod_program_path(), "--rank", plan.run_dir, IN_DIR, "--", *ranks]
    return Command(tuple(argv[:cut] + wrapped), command.env, command.env_defaults)


def pod_program_path() -> str:
    return posixpath.join(IN_DIR, "pod.py")


def pod_program_source() -> str:
    return rankside.text(rankside.KUBE_POD)


def literal(text: str) -> str:
    """``text`` as the kubelet must pass it on: it expands ``$(NAME)`` in a container's
    command, args and env values and turns ``$$`` into ``$``, so every ``$`` is doubled."""
    return text.replace("$", "$$")


def container_argv(objects: RunObjects) -> list[str]:
    """The container's command: the pod program, the run folder and the ConfigMap's folder,
    then the launcher's argv."""
    return [
        literal(a)
        for a in (
            objects.cfg.python,
            pod_program_path(),
            run_dir(objects.cfg, objects.run_id),
            IN_DIR,
            "--",
            *objects.command.argv,
        )
    ]


def container_env(command: Command) -> list[dict[str, str]]:
    merged = {**command.env_defaults, **command.env}
    return [{"name": k, "value": literal(merged[k])} for k in sorted(merged)]


def resources(cfg: KubeConfig) -> dict[str, dict[str, str]]:
    out = {part: dict(cfg.resources.get(part, {})) for part in ("requests", "limits")}
    if cfg.gpus_per_node:
        for part in out.values():
            part[GPU_RESOURCE] = str(cfg.gpus_per_node)
    return {k: v for k, v in out.items() if v}


def check_snapshot_size(snapshot: bytes, cfg: KubeConfig) -> bool:
    """True when the snapshot goes in the ConfigMap; False when this machine puts it on
    ``workdir_pvc`` itself (through ``workdir_local``). Raises when it can do neither."""
    room = CONFIGMAP_LIMIT - len(pod_program_source().encode())
    if len(snapshot) <= room:
        return True
    if cfg.workdir_pvc and cfg.workdir_local:
        return False
    size = (
        f"the run's snapshot is {len(snapshot) / 2**20:.2f} MiB compressed, over the "
        f"{room / 2**20:.2f} MiB a ConfigMap can carry"
    )
    if cfg.workdir_pvc:
        raise TargetError(
            f'{size}: set workdir_local = "PATH" in the target, where this '
            f"machine mounts workdir_pvc {cfg.workdir_pvc!r}, so the snapshot is "
            "written there; or make it smaller (a .jtignore in --source)"
        )
    raise TargetError(
        f'{size}: set workdir_pvc = "CLAIM" in the target (a ReadWriteMany '
        'PersistentVolumeClaim for the run folders) and workdir_local = "PATH" '
        "(where this machine mounts it), or make the snapshot smaller (a "
        ".jtignore in --source)"
    )


# -- the objects -----------------------------------------------------------------------
def _metadata(objects: RunObjects, name: str | None = None) -> dict[str, Any]:
    spec = objects.spec
    return {
        "name": name or objects.name,
        "namespace": objects.namespace,
        "labels": run_labels(objects.run_id, spec.name),
        "annotations": run_annotations(objects.run_id, spec.name, spec.params),
    }


def config_map(objects: RunObjects) -> dict[str, Any]:
    data = {"pod.py": pod_program_source(), "spec.json": objects.spec_json}
    cm: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(objects),
        "immutable": True,
        "data": data,
    }
    if objects.snapshot is not None:
        cm["binaryData"] = {"snapshot.tar.gz": base64.b64encode(objects.snapshot).decode()}
    return cm


def secret(objects: RunObjects) -> dict[str, Any]:
    return run_secret.secret(_metadata(objects), objects.secrets_json or "")


def _volumes(objects: RunObjects) -> list[dict[str, Any]]:
    run = (
        {"name": "run", "persistentVolumeClaim": {"claimName": objects.cfg.workdir_pvc}}
        if objects.cfg.workdir_pvc
        else {"name": "run", "emptyDir": {}}
    )
    volumes: list[dict[str, Any]] = [{"name": "jt-in", "configMap": {"name": objects.name}}, run]
    if objects.secrets_json is not None:
        volumes.append(run_secret.volume(objects.name))
    return volumes


def _mounts(objects: RunObjects) -> list[dict[str, Any]]:
    folder = PVC_DIR if objects.cfg.workdir_pvc else RUN_DIR
    mounts: list[dict[str, Any]] = [
        {"name": "jt-in", "mountPath": IN_DIR, "readOnly": True},
        {"name": "run", "mountPath": folder},
    ]
    if objects.secrets_json is not None:
        mounts.append(run_secret.mount())
    return mounts


def _placement(objects: RunObjects) -> dict[str, Any]:
    cfg, out = objects.cfg, dict[str, Any]()
    if cfg.node_selector:
        out["nodeSelector"] = dict(cfg.node_selector)
    if cfg.tolerations:
        out["tolerations"] = [dict(t) for t in cfg.tolerations]
    if cfg.service_account:
        out["serviceAccountName"] = cfg.service_account
    elif objects.session:  # its own, which may read the session's requests
        out["serviceAccountName"] = objects.name
    return out


def headless_service(objects: RunObjects) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(objects),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": _selector(objects),
            "ports": [
                {"name": "rdzv", "port": RDZV_PORT, "targetPort": RDZV_PORT, "protocol": "TCP"}
            ],
        },
    }


def _selector(objects: RunObjects) -> dict[str, str]:
    key = next(iter(run_labels(objects.run_id, objects.spec.name)))
    return {key: run_labels(objects.run_id, objects.spec.name)[key]}


def indexed_job(objects: RunObjects) -> dict[str, Any]:
    nodes = objects.spec.launch.nodes
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": objects.image,
        "command": container_argv(objects),
        "env": container_env(objects.command),
        "volumeMounts": _mounts(objects),
        "ports": [{"name": "rdzv", "containerPort": RDZV_PORT, "protocol": "TCP"}],
    }
    if resources(objects.cfg):
        container["resources"] = resources(objects.cfg)
    meta = _metadata(objects)
    pod_spec = {
        "restartPolicy": "Never",
        "subdomain": objects.name,
        "enableServiceLinks": False,
        "containers": [container],
        "volumes": _volumes(objects),
        **_placement(objects),
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "completionMode": "Indexed",
            "completions": nodes,
            "parallelism": nodes,
            "backoffLimit": 0,
            # A failed or evicted pod ends the whole job: the other ranks cannot go on without it.
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "FailJob",
                        "onExitCodes": {
                            "containerName": CONTAINER,
                            "operator": "NotIn",
                            "values": [0],
                        },
                    },
                    {
                        "action": "FailJob",
                        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                    },
                ]
            },
            "template": {
                "metadata": {
                    "labels": dict(meta["labels"]),
                    "annotations": dict(meta["annotations"]),
                },
                "spec": pod_spec,
            },
        },
    }


def train_job(objects: RunObjects) -> dict[str, Any]:
    cfg, launch = objects.cfg, objects.spec.launch
    mpi = launch.launcher in MPI_LAUNCHERS
    meta = _metadata(objects)
    # The pod program as the command and the launcher as its args: the Trainer replaces a
    # runtime container's command and args each only when the TrainJob gives them, so a
    # runtime's args (the MPI runtime's launcher has some) would otherwise follow our argv.
    argv = container_argv(objects)
    cut = argv.index("--") + 1
    trainer: dict[str, Any] = {
        "image": objects.image,
        "command": argv[:cut],
        "args": argv[cut:],
        "env": container_env(objects.command),
        "numNodes": launch.nodes,
        "numProcPerNode": launch.procs,
    }
    if resources(cfg):
        trainer["resourcesPerNode"] = resources(cfg)
    jobs = [
        {
            "name": job,
            "template": {
                "metadata": {"labels": dict(meta["labels"])},
                "spec": {
                    "template": {
                        "metadata": {
                            "labels": dict(meta["labels"]),
                            "annotations": dict(meta["annotations"]),
                        },
                        "spec": {
                            "containers": [{"name": CONTAINER, "volumeMounts": _mounts(objects)}],
                            "volumes": _volumes(objects),
                            **_placement(objects),
                        },
                    }
                },
            },
        }
        for job in (("launcher", "node") if mpi else ("node",))
    ]
    return {
        "apiVersion": TRAINER_API,
        "kind": "TrainJob",
        "metadata": meta,
        "spec": {
            "runtimeRef": {
                "apiGroup": "trainer.kubeflow.org",
                "kind": "ClusterTrainingRuntime",
                "name": cfg.mpi_runtime if mpi else cfg.runtime,
            },
            "trainer": trainer,
            "runtimePatches": [
                {
                    "manager": "jupyter-trainer",
                    "trainingRuntimeSpec": {
                        "template": {
                            "metadata": {"labels": dict(meta["labels"])},
                            "spec": {"replicatedJobs": jobs},
                        }
                    },
                }
            ],
        },
    }


def manifests(objects: RunObjects) -> list[dict[str, Any]]:
    """Every object the run creates, in the order to create them. With a Kueue ``queue``,
    the Job or TrainJob is created suspended in that LocalQueue: Kueue starts it once the
    queue's quota admits it."""
    first = [secret(objects)] if objects.secrets_json is not None else []
    if objects.session:
        first += access_manifests(_metadata(objects), objects.cfg.service_account)
    if objects.api == "trainjob":
        docs = [*first, config_map(objects), train_job(objects)]
    else:
        docs = [*first, config_map(objects), headless_service(objects), indexed_job(objects)]
    if objects.cfg.queue:
        main = docs[-1]
        main["metadata"]["labels"][QUEUE_LABEL] = objects.cfg.queue
        main["spec"]["suspend"] = True
    return docs


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:  # every object written out in full
        return True


def to_yaml(docs: Sequence[Mapping[str, Any]]) -> str:
    """``docs`` as a multi-document YAML stream, as ``kubectl apply -f -`` reads it."""
    return yaml.dump_all(
        list(docs), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1000
    )


def spec_json(spec: RunSpec) -> str:
    return json.dumps(spec.to_dict(), indent=2, sort_keys=True)
