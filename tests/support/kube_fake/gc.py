"""Deletion with propagation policies, and the garbage collector that follows ownerReferences."""

from __future__ import annotations

FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"


def default_policy(res) -> str:
    # the REST default for batch/v1 Jobs is still to orphan their pods
    return "Orphan" if (res.group, res.kind) == ("batch", "Job") else "Background"


class GarbageCollector:
    def __init__(self, cluster):
        self.cluster = cluster

    def _all(self):
        for res in self.cluster.registry.resources:
            if res.kind in ("Event", "Namespace", "Node"):
                continue
            for obj in self.cluster.store.list(res)[0]:
                yield res, obj

    def dependents(self, uid: str):
        return [
            (res, obj)
            for res, obj in self._all()
            if any(r.get("uid") == uid for r in obj["metadata"].get("ownerReferences") or [])
        ]

    def delete(self, res, ns, name, policy, grace):
        store = self.cluster.store
        obj = store.get(res, ns, name)
        policy = policy or default_policy(res)
        if policy == "Orphan":
            uid = obj["metadata"]["uid"]
            for dres, dep in self.dependents(uid):
                dm = dep["metadata"]
                store.mutate(
                    dres,
                    dm.get("namespace"),
                    dm["name"],
                    lambda o: o["metadata"].__setitem__(
                        "ownerReferences",
                        [r for r in o["metadata"]["ownerReferences"] if r["uid"] != uid],
                    ),
                )
        if res.kind == "Pod":
            return self.cluster.kubelet.delete_pod(ns, name, grace)
        if policy == "Foreground" and self.dependents(obj["metadata"]["uid"]):
            return store.mark_deleted(res, ns, name, FOREGROUND)
        return store.mark_deleted(res, ns, name)

    def sync(self):
        store = self.cluster.store
        with store.cond:  # one snapshot: an owner and its dependents are seen together
            objs = list(self._all())
        uids = {o["metadata"]["uid"] for _, o in objs}
        for res, obj in objs:
            meta = obj["metadata"]
            if meta.get("deletionTimestamp") and FOREGROUND in (meta.get("finalizers") or []):
                deps = self.dependents(meta["uid"])
                for dres, dep in deps:
                    if not dep["metadata"].get("deletionTimestamp"):
                        self._quiet_delete(dres, dep, "Foreground")
                if not deps:
                    store.mutate(
                        res,
                        meta.get("namespace"),
                        meta["name"],
                        lambda o: o["metadata"].__setitem__(
                            "finalizers",
                            [f for f in o["metadata"]["finalizers"] if f != FOREGROUND],
                        ),
                    )
            refs = meta.get("ownerReferences") or []
            if (
                refs
                and not meta.get("deletionTimestamp")
                and all(r["uid"] not in uids for r in refs)
            ):
                self._quiet_delete(res, obj, "Background")

    def _quiet_delete(self, res, obj, policy):
        try:
            self.delete(
                res, obj["metadata"].get("namespace"), obj["metadata"]["name"], policy, None
            )
        except Exception as exc:  # gone meanwhile
            if getattr(exc, "code", None) != 404:
                raise
