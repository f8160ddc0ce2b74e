"""The defaults the API server (and the Trainer's webhook) fill in on create."""

from __future__ import annotations

import itertools
import uuid

from . import mpi, trainer
from .store import ApiError, now

_IPS = itertools.count(10)

MANAGED_BY = "trainer.kubeflow.org/trainjob-controller"


def _pod_spec(spec: dict):
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("serviceAccountName", "default")
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        c.setdefault(
            "imagePullPolicy",
            "Always"
            if c.get("image", "").endswith(":latest") or ":" not in c.get("image", "")
            else "IfNotPresent",
        )
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        c.setdefault("resources", {})


def admit(cluster, res, obj: dict):
    meta = obj["metadata"]
    kind = res.kind
    if kind == "Pod":
        _pod_spec(obj.setdefault("spec", {}))
        obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    elif kind == "Job":
        meta["uid"] = str(uuid.uuid4())
        spec = obj.setdefault("spec", {})
        spec.setdefault("parallelism", 1)
        if spec.get("completionMode", "NonIndexed") == "NonIndexed":
            spec.setdefault("completions", spec["parallelism"] if "completions" in spec else 1)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("suspend", False)
        spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
        own = {
            "batch.kubernetes.io/controller-uid": meta["uid"],
            "batch.kubernetes.io/job-name": meta.get("name", ""),
            "controller-uid": meta["uid"],
            "job-name": meta.get("name", ""),
        }
        if not spec.get("manualSelector"):
            spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": meta["uid"]}}
        template = spec.setdefault("template", {})
        tmeta = template.setdefault("metadata", {})
        tmeta["labels"] = {**(tmeta.get("labels") or {}), **own}
        meta["labels"] = {**own, **(meta.get("labels") or {})}
        meta["labels"].pop("batch.kubernetes.io/controller-uid", None)
        meta["labels"].pop("controller-uid", None)
        _pod_spec(template.setdefault("spec", {}))
        obj["status"] = {}
    elif kind == "Service":
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        if spec.get("clusterIP") != "None":
            spec["clusterIP"] = f"10.96.{next(_IPS) // 250}.{next(_IPS) % 250 + 1}"
        spec["clusterIPs"] = [spec["clusterIP"]]
        for port in spec.get("ports") or []:
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
        obj["status"] = {"loadBalancer": {}}
    elif kind == "Namespace":
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}
    elif kind == "PersistentVolumeClaim":
        obj["status"] = {"phase": "Bound"}
    elif kind == "TrainJob":
        spec = obj.setdefault("spec", {})
        ref = spec.setdefault("runtimeRef", {})
        ref.setdefault("apiGroup", "trainer.kubeflow.org")
        ref.setdefault("kind", "ClusterTrainingRuntime")
        spec.setdefault("managedBy", MANAGED_BY)
        rt_res = cluster.registry.by_kind("trainer.kubeflow.org/v1alpha1", ref["kind"])
        ns = meta.get("namespace") if ref["kind"] == "TrainingRuntime" else None
        if ref.get("name") and (
            rt_res is None or cluster.store.find(rt_res, ns, ref["name"]) is None
        ):
            raise ApiError(
                422,
                "Invalid",
                f'admission webhook "validator.trainjob.trainer.kubeflow.org" '
                f'denied the request: spec.runtimeRef: Invalid value: "{ref["name"]}": '
                f"{ref['kind']} {ref['name']} not found",
                {
                    "name": meta.get("name"),
                    "kind": "TrainJob",
                    "causes": [
                        {
                            "reason": "FieldValueInvalid",
                            "field": "spec.runtimeRef",
                            "message": f"{ref['kind']} {ref['name']} not found",
                        }
                    ],
                },
            )
        runtime = cluster.store.find(rt_res, ns, ref["name"]) if ref.get("name") else None
        errors = trainer.patch_errors(runtime, obj) if runtime is not None else []
        if runtime is not None and mpi.policy(runtime) is not None:
            errors += mpi.validate(mpi.policy(runtime), obj)
        if errors:
            raise ApiError(
                422,
                "Invalid",
                'admission webhook "validator.trainjob.trainer.kubeflow.org" '
                f"denied the request: {'; '.join(errors)}",
                {
                    "name": meta.get("name"),
                    "kind": "TrainJob",
                    "causes": [
                        {"reason": "FieldValueInvalid", "field": e.split(":")[0], "message": e}
                        for e in errors
                    ],
                },
            )
        for patch in spec.get("runtimePatches") or []:
            patch["time"] = now()  # the webhook stamps each patch
