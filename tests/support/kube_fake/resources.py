"""The resource kinds the fake API server serves, and its discovery documents."""

from __future__ import annotations

from dataclasses import dataclass

TRAINER_GROUP = "trainer.kubeflow.org"
TRAINER_VERSION = "v1alpha1"


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core group
    version: str
    kind: str
    plural: str
    namespaced: bool = True
    verbs: tuple = (
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    )
    subresources: tuple = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()


CORE = [
    Resource("", "v1", "Namespace", "namespaces", namespaced=False, subresources=("status",)),
    Resource("", "v1", "Node", "nodes", namespaced=False, subresources=("status",)),
    Resource("", "v1", "ConfigMap", "configmaps"),
    Resource("", "v1", "Secret", "secrets"),
    Resource("", "v1", "Service", "services", subresources=("status",)),
    Resource("", "v1", "Pod", "pods", subresources=("status", "log")),
    Resource("", "v1", "Event", "events"),
    Resource("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", subresources=("status",)),
    Resource("", "v1", "ServiceAccount", "serviceaccounts"),
    Resource("batch", "v1", "Job", "jobs", subresources=("status",)),
    Resource("rbac.authorization.k8s.io", "v1", "Role", "roles"),
    Resource("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings"),
]
TRAINER = [
    Resource(TRAINER_GROUP, TRAINER_VERSION, "TrainJob", "trainjobs", subresources=("status",)),
    Resource(
        TRAINER_GROUP,
        TRAINER_VERSION,
        "ClusterTrainingRuntime",
        "clustertrainingruntimes",
        namespaced=False,
    ),
    Resource(TRAINER_GROUP, TRAINER_VERSION, "TrainingRuntime", "trainingruntimes"),
]


class Registry:
    """The resources one fake cluster serves (the Trainer's only when its API is installed)."""

    def __init__(self, trainjob_api: bool, kueue: bool = False):
        from .kueue import WORKLOAD

        self.resources = CORE + (TRAINER if trainjob_api else []) + ([WORKLOAD] if kueue else [])

    def find(self, group: str, version: str, plural: str) -> Resource | None:
        for res in self.resources:
            if (res.group, res.version, res.plural) == (group, version, plural):
                return res
        return None

    def by_kind(self, api_version: str, kind: str) -> Resource | None:
        for res in self.resources:
            if (res.api_version, res.kind) == (api_version, kind):
                return res
        return None

    def group_versions(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for res in self.resources:
            out.setdefault(res.group, [])
            if res.version not in out[res.group]:
                out[res.group].append(res.version)
        return out

    # discovery documents, in the shapes the real server sends
    def core_versions(self) -> dict:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}
            ],
        }

    def api_groups(self) -> dict:
        groups = []
        for group, versions in self.group_versions().items():
            if not group:
                continue
            gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
            groups.append({"name": group, "versions": gvs, "preferredVersion": gvs[0]})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def api_group(self, group: str) -> dict | None:
        for g in self.api_groups()["groups"]:
            if g["name"] == group:
                return {"kind": "APIGroup", "apiVersion": "v1", **g}
        return None

    def resource_list(self, group: str, version: str) -> dict | None:
        found = [r for r in self.resources if (r.group, r.version) == (group, version)]
        if not found:
            return None
        items = []
        for r in found:
            items.append(
                {
                    "name": r.plural,
                    "singularName": r.singular,
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": list(r.verbs),
                }
            )
            for sub in r.subresources:
                verbs = ["get"] if sub == "log" else ["get", "patch", "update"]
                items.append(
                    {
                        "name": f"{r.plural}/{sub}",
                        "singularName": "",
                        "namespaced": r.namespaced,
                        "kind": "Pod" if sub == "log" else r.kind,
                        "verbs": verbs,
                    }
                )
        gv = f"{group}/{version}" if group else version
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": gv,
            "resources": items,
        }
