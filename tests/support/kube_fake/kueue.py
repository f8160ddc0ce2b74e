"""Kueue, as far as a run sees it: a Workload for each Job or TrainJob labelled with a
LocalQueue, admitted first come first served within the queue's CPU quota (the job is then
unsuspended), and the visibility API's pending workloads with their positions."""

from __future__ import annotations

import math

from .jobs import terminal
from .resources import Resource
from .store import now

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta1"
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
FLAVOR = "default-flavor"

WORKLOAD = Resource(KUEUE_GROUP, KUEUE_VERSION, "Workload", "workloads", subresources=("status",))


def cpu(quantity) -> float:
    text = str(quantity)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def _condition(type_: str, status: str, reason: str, message: str) -> dict:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now(),
    }


class KueueController:
    """``quotas`` maps a LocalQueue's name to the CPUs its ClusterQueue may admit at once."""

    def __init__(self, cluster, quotas: dict[str, str]):
        self.cluster = cluster
        self.quotas = {queue: cpu(q) for queue, q in quotas.items()}
        self.order: dict[str, int] = {}  # workload name -> when it was made (its place)
        reg = cluster.registry
        self.owners = [
            r
            for r in (
                reg.find("batch", "v1", "jobs"),
                reg.find("trainer.kubeflow.org", "v1alpha1", "trainjobs"),
            )
            if r is not None
        ]

    def sync(self):
        store = self.cluster.store
        workloads, _ = store.list(WORKLOAD)
        by_owner = {w["metadata"]["labels"][JOB_UID_LABEL]: w for w in workloads}
        owners = {}
        for res in self.owners:
            for obj in store.list(res)[0]:
                queue = (obj["metadata"].get("labels") or {}).get(QUEUE_LABEL)
                if obj["metadata"].get("ownerReferences"):
                    continue  # a TrainJob's own Jobs: Kueue manages the TrainJob, not them
                if queue in self.quotas and not obj["metadata"].get("deletionTimestamp"):
                    owners[obj["metadata"]["uid"]] = (res, obj)
                    if obj["metadata"]["uid"] not in by_owner:
                        by_owner[obj["metadata"]["uid"]] = self._workload(res, obj, queue)
        for uid, wl in list(by_owner.items()):
            if uid not in owners:  # its job is gone: so is its workload (and its quota)
                store.remove(WORKLOAD, wl["metadata"]["namespace"], wl["metadata"]["name"])
                del by_owner[uid]
        for queue, quota in self.quotas.items():
            self._admit(
                queue, quota, [w for w in by_owner.values() if self._queue(w) == queue], owners
            )

    @staticmethod
    def _queue(wl) -> str:
        return wl["spec"]["queueName"]

    @staticmethod
    def _admitted(wl) -> bool:
        return any(
            c["type"] == "Admitted" and c["status"] == "True"
            for c in (wl.get("status") or {}).get("conditions") or []
        )

    def pending(self, queue: str) -> list[dict]:
        """The queue's workloads not admitted yet, oldest first."""
        workloads, _ = self.cluster.store.list(WORKLOAD)
        waiting = [w for w in workloads if self._queue(w) == queue and not self._admitted(w)]
        return sorted(waiting, key=lambda w: self.order.get(w["metadata"]["name"], 0))

    def _workload(self, res, obj, queue) -> dict:
        meta = obj["metadata"]
        spec = obj.get("spec") or {}
        if res.kind == "Job":
            count = spec.get("parallelism", 1)
            requests = (
                spec["template"]["spec"]["containers"][0].get("resources", {}).get("requests", {})
            )
        else:
            trainer = spec.get("trainer") or {}
            count = trainer.get("numNodes", 1)
            requests = (trainer.get("resourcesPerNode") or {}).get("requests", {})
        wl = {
            "apiVersion": WORKLOAD.api_version,
            "kind": "Workload",
            "metadata": {
                "name": f"{res.singular}-{meta['name']}-{meta['uid'][:5]}",
                "namespace": meta["namespace"],
                "labels": {JOB_UID_LABEL: meta["uid"]},
                "ownerReferences": [
                    {
                        "apiVersion": obj["apiVersion"],
                        "kind": res.kind,
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "queueName": queue,
                "podSets": [{"name": "main", "count": count, "cpu": cpu(requests.get("cpu", "1"))}],
            },
        }
        self.order[wl["metadata"]["name"]] = len(self.order) + 1
        return self.cluster.store.create(WORKLOAD, wl)

    def _admit(self, queue, quota, workloads, owners):
        def need(wl):
            return sum(p["count"] * p["cpu"] for p in wl["spec"]["podSets"])

        used = sum(
            need(w)
            for w in workloads
            if self._admitted(w) and not terminal(owners[w["metadata"]["labels"][JOB_UID_LABEL]][1])
        )
        blocked = False
        for wl in self.pending(queue):
            res, owner = owners[wl["metadata"]["labels"][JOB_UID_LABEL]]
            want = need(wl)
            if not blocked and used + want <= quota:
                used += want
                conditions = [
                    _condition(
                        "QuotaReserved",
                        "True",
                        "QuotaReserved",
                        f"Quota reserved in ClusterQueue {queue}-cq",
                    ),
                    _condition("Admitted", "True", "Admitted", "The workload is admitted"),
                ]
                self._set(wl, conditions)
                self.cluster.store.mutate(
                    res,
                    owner["metadata"]["namespace"],
                    owner["metadata"]["name"],
                    lambda o: o["spec"].__setitem__("suspend", False),
                )
                continue
            blocked = True  # first come, first served: nothing overtakes the head
            short = used + want - quota
            message = (
                f"couldn't assign flavors to pod set main: insufficient unused quota for cpu "
                f"in flavor {FLAVOR}, {math.ceil(short) if short == int(short) else short:g} more needed"
            )
            self._set(wl, [_condition("QuotaReserved", "False", "Pending", message)])

    def _set(self, wl, conditions):
        old = (wl.get("status") or {}).get("conditions") or []
        if [(c["type"], c["status"], c["message"]) for c in old] == [
            (c["type"], c["status"], c["message"]) for c in conditions
        ]:
            return

        def change(obj):
            obj["status"] = {"conditions": conditions}

        self.cluster.store.mutate(
            WORKLOAD, wl["metadata"]["namespace"], wl["metadata"]["name"], change
        )


def pending_summary(controller: KueueController, ns: str, queue: str) -> dict:
    """The visibility API's answer for LocalQueue ``queue``: its pending workloads in order."""
    items = [
        {
            "metadata": {
                "name": wl["metadata"]["name"],
                "namespace": wl["metadata"]["namespace"],
                "ownerReferences": wl["metadata"]["ownerReferences"],
                "creationTimestamp": wl["metadata"]["creationTimestamp"],
            },
            "priority": 0,
            "localQueueName": queue,
            "positionInClusterQueue": i,
            "positionInLocalQueue": i,
        }
        for i, wl in enumerate(
            w for w in controller.pending(queue) if w["metadata"]["namespace"] == ns
        )
    ]
    return {
        "kind": "PendingWorkloadsSummary",
        "apiVersion": f"{VISIBILITY_GROUP}/{KUEUE_VERSION}",
        "metadata": {"creationTimestamp": None},
        "items": items,
    }
