"""The Kubeflow Trainer v2 controller, for TrainJobs that reference a torch or an MPI runtime: it
makes what the real one makes through a JobSet (a headless Service named after the TrainJob and one
Indexed Job per replicated job, `<trainjob>-<replicatedJob>-0`), applies the TrainJob's
`runtimePatches` to the runtime's template, gives the trainer's image, command and env to the
`node` container of the job labelled as the trainer's, and adds what the torch plugin (PET_*
variables) or the MPI plugin (mpi.py: SSH keys, hostfile, OMPI_* variables) adds."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import yaml

from . import mpi as mpi_plugin
from .jobs import terminal
from .store import now

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
RJOB_NAME = "jobset.sigs.k8s.io/replicatedjob-name"
TRAINER_NODE = "node"
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
# The lists the TrainJob CRD declares as x-kubernetes-list-type: map keyed by name (under
# runtimePatches); every other list (tolerations) is atomic, every object merges field by field.
PATCH_LIST_MAPS = {
    "replicatedJobs",
    "containers",
    "initContainers",
    "volumes",
    "imagePullSecrets",
    "schedulingGates",
    "env",
    "volumeMounts",
}


def load_runtime(path: Path) -> dict:
    """A runtime from the Helm chart's template (its `{{ }}` lines dropped)."""
    text = "\n".join(
        line for line in path.read_text().splitlines() if not re.match(r"^\s*\{\{.*\}\}\s*$", line)
    )
    return yaml.safe_load(text)


def apply_patch(target, patch, key=None):
    """``patch`` over ``target`` as server-side apply merges a runtime patch: objects field by
    field, list-maps entry by entry on their name, anything else replaced."""
    if isinstance(patch, dict):
        out = copy.deepcopy(target) if isinstance(target, dict) else {}
        for k, v in patch.items():
            out[k] = apply_patch(out.get(k), v, k)
        return out
    if isinstance(patch, list) and key in PATCH_LIST_MAPS:
        out = [copy.deepcopy(t) for t in target or []]
        for item in patch:
            at = next((i for i, t in enumerate(out) if t.get("name") == item.get("name")), None)
            if at is None:
                out.append(copy.deepcopy(item))
            else:
                out[at] = apply_patch(out[at], item)
        return out
    return copy.deepcopy(patch)


def patched_template(runtime: dict, trainjob: dict) -> dict:
    """The runtime's JobSet template with the TrainJob's runtimePatches applied in order."""
    template = copy.deepcopy(runtime["spec"]["template"])
    for patch in (trainjob.get("spec") or {}).get("runtimePatches") or []:
        template = apply_patch(
            template, (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
        )
    return template


def patch_errors(runtime: dict, trainjob: dict) -> list[str]:
    """What the Trainer's webhook refuses in runtimePatches: a replicated job or a container
    the runtime does not have (a patch may change containers, not add them)."""
    jobs = {j["name"]: j for j in runtime["spec"]["template"]["spec"]["replicatedJobs"]}
    errors = []
    for i, patch in enumerate((trainjob.get("spec") or {}).get("runtimePatches") or []):
        spec = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}
        for j, rjob in enumerate(spec.get("replicatedJobs") or []):
            where = (
                f"spec.runtimePatches[{i}].trainingRuntimeSpec.template.spec.replicatedJobs[{j}]"
            )
            if rjob["name"] not in jobs:
                errors.append(
                    f'{where}.name: Invalid value: "{rjob["name"]}": the runtime has no '
                    f"replicated job of that name (it has {', '.join(sorted(jobs))})"
                )
                continue
            pod = jobs[rjob["name"]]["template"]["spec"]["template"]["spec"]
            pod_patch = (
                ((rjob.get("template") or {}).get("spec") or {}).get("template") or {}
            ).get("spec") or {}
            for field in ("containers", "initContainers"):
                have = {c["name"] for c in pod.get(field) or []}
                for k, c in enumerate(pod_patch.get(field) or []):
                    if c["name"] not in have:
                        errors.append(
                            f"{where}.template.spec.template.spec.{field}[{k}].name: "
                            f'Invalid value: "{c["name"]}": the replicated job has no '
                            f"such {field[:-1]}"
                        )
    return errors


class TrainJobController:
    def __init__(self, cluster, master_port):
        self.cluster = cluster
        reg = cluster.registry
        self.res = reg.find("trainer.kubeflow.org", "v1alpha1", "trainjobs")
        self.job_res = reg.find("batch", "v1", "jobs")
        self.svc_res = reg.find("", "v1", "services")
        self.master_port = master_port

    def sync(self):
        if self.res is None:
            return
        for tj in self.cluster.store.list(self.res)[0]:
            meta = tj["metadata"]
            if meta.get("deletionTimestamp") or (tj.get("spec") or {}).get("suspend"):
                continue
            jobs = [
                j
                for j in self.cluster.store.list(
                    self.job_res, meta["namespace"], f"{JOBSET_NAME}={meta['name']}"
                )[0]
                if any(r["uid"] == meta["uid"] for r in j["metadata"].get("ownerReferences", []))
            ]
            if not jobs and not terminal(tj):
                self._create(tj)
            else:
                self._status(tj, jobs)

    def _runtime(self, tj):
        ref = tj["spec"]["runtimeRef"]
        res = self.cluster.registry.by_kind("trainer.kubeflow.org/v1alpha1", ref["kind"])
        ns = tj["metadata"]["namespace"] if ref["kind"] == "TrainingRuntime" else None
        return self.cluster.store.find(res, ns, ref["name"])

    def _owner(self, tj):
        return [
            {
                "apiVersion": tj["apiVersion"],
                "kind": "TrainJob",
                "name": tj["metadata"]["name"],
                "uid": tj["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]

    def _create(self, tj):
        runtime = self._runtime(tj)
        if runtime is None:
            return
        meta, trainer = tj["metadata"], tj["spec"].get("trainer") or {}
        name, ns = meta["name"], meta["namespace"]
        policy = runtime["spec"].get("mlPolicy") or {}
        nodes = trainer.get("numNodes") or policy.get("numNodes") or 1
        labels = {**(meta.get("labels") or {}), JOBSET_NAME: name}
        mpi = mpi_plugin.policy(runtime)
        rjobs = patched_template(runtime, tj)["spec"]["replicatedJobs"]
        counts = {
            r["name"]: (nodes if mpi is None else mpi_plugin.node_count(mpi, nodes))
            if r["name"] == TRAINER_NODE
            else 1
            for r in rjobs
        }
        self.cluster.create(
            self.svc_res,
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": name,
                    "namespace": ns,
                    "labels": labels,
                    "ownerReferences": self._owner(tj),
                },
                "spec": {
                    "clusterIP": "None",
                    "selector": {JOBSET_NAME: name},
                    "publishNotReadyAddresses": True,
                },
            },
        )
        if mpi is not None:
            for plural, obj in mpi_plugin.objects(mpi, tj, trainer, counts, self._owner(tj)):
                self.cluster.create(self.cluster.registry.find("", "v1", plural), obj)
        for rjob in rjobs:
            job_spec = copy.deepcopy(rjob["template"]["spec"])
            tmeta = copy.deepcopy(rjob["template"].get("metadata") or {})
            pod_t = job_spec["template"]
            pod_meta = pod_t.setdefault("metadata", {})
            pod_meta["labels"] = {
                **(pod_meta.get("labels") or {}),
                JOBSET_NAME: name,
                RJOB_NAME: rjob["name"],
                "jobset.sigs.k8s.io/job-index": "0",
            }
            pod = pod_t["spec"]
            pod["subdomain"] = name
            pod.setdefault("restartPolicy", "OnFailure")  # JobSet's default
            count = counts[rjob["name"]]
            job_spec.update(
                {"completionMode": "Indexed", "completions": count, "parallelism": count}
            )
            is_trainer = (tmeta.get("labels") or {}).get(ANCESTOR) == "trainer"
            gets_env = is_trainer or (
                mpi is not None
                and mpi_plugin.launcher_as_node(mpi)
                and rjob["name"] == TRAINER_NODE
            )
            for c in pod["containers"]:
                if c["name"] == TRAINER_NODE and gets_env:
                    self._trainer_container(c, tj, trainer, policy, nodes, is_trainer)
            if mpi is not None:
                mpi_plugin.enforce(mpi, rjob, pod, tj, trainer)
            self.cluster.create(
                self.job_res,
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {
                        "name": f"{name}-{rjob['name']}-0",
                        "namespace": ns,
                        "labels": {
                            **labels,
                            **(tmeta.get("labels") or {}),
                            RJOB_NAME: rjob["name"],
                        },
                        "ownerReferences": self._owner(tj),
                    },
                    "spec": job_spec,
                },
            )

    def _trainer_container(self, c, tj, trainer, policy, nodes, is_trainer=True):
        name = tj["metadata"]["name"]
        for field in ("image", "command", "args"):
            if trainer.get(field) and is_trainer:
                c[field] = trainer[field]
        if trainer.get("resourcesPerNode") and is_trainer:
            c["resources"] = trainer["resourcesPerNode"]
        env = {e["name"]: e for e in c.get("env") or []}
        for e in trainer.get("env") or []:
            env[e["name"]] = e
        if "torch" in policy:
            procs = trainer.get(
                "numProcPerNode", (policy.get("torch") or {}).get("numProcPerNode", "auto")
            )
            for key, value in (
                ("PET_NNODES", str(nodes)),
                ("PET_NPROC_PER_NODE", str(procs)),
                ("PET_MASTER_ADDR", f"{name}-{TRAINER_NODE}-0-0.{name}"),
                ("PET_MASTER_PORT", str(self.master_port(tj))),
            ):
                env[key] = {"name": key, "value": value}
            env["PET_NODE_RANK"] = {
                "name": "PET_NODE_RANK",
                "valueFrom": {
                    "fieldRef": {
                        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
                    }
                },
            }
            c["ports"] = [{"containerPort": self.master_port(tj), "protocol": "TCP"}]
        c["env"] = list(env.values())

    def _success_jobs(self, tj, jobs):
        """The jobs whose completion completes the JobSet: its successPolicy's targets (an
        MPI runtime's launcher) with operator All, else every job."""
        runtime = self._runtime(tj) or {}
        success = ((runtime.get("spec") or {}).get("template", {}).get("spec") or {}).get(
            "successPolicy"
        ) or {}
        targets = success.get("targetReplicatedJobs")
        chosen = [
            j for j in jobs if not targets or j["metadata"]["labels"].get(RJOB_NAME) in targets
        ]
        return chosen or jobs

    def _status(self, tj, jobs):
        meta = tj["metadata"]
        status = copy.deepcopy(tj.get("status") or {})
        status["jobsStatus"] = [
            {
                "name": j["metadata"]["labels"].get(RJOB_NAME, j["metadata"]["name"]),
                "active": int(bool(j["status"].get("active"))) if not terminal(j) else 0,
                "ready": int(bool(j["status"].get("ready"))) if not terminal(j) else 0,
                "succeeded": int(terminal(j) == "Complete"),
                "failed": int(terminal(j) == "Failed"),
                "suspended": int(bool(j["spec"].get("suspend"))),
            }
            for j in jobs
        ]
        if not terminal(tj) and jobs:
            failed = [j for j in jobs if terminal(j) == "Failed"]
            t = now()
            if failed:
                status.setdefault("conditions", []).append(
                    {
                        "type": "Failed",
                        "status": "True",
                        "reason": "FailedJobs",
                        "message": "jobset failed due to one or more job failures (first failed job: "
                        f"{failed[0]['metadata']['name']})",
                        "lastTransitionTime": t,
                    }
                )
            elif all(terminal(j) == "Complete" for j in self._success_jobs(tj, jobs)):
                status.setdefault("conditions", []).append(
                    {
                        "type": "Complete",
                        "status": "True",
                        "reason": "AllJobsCompleted",
                        "message": "jobset completed successfully",
                        "lastTransitionTime": t,
                    }
                )
        if status != tj.get("status"):
            self.cluster.store.mutate(
                self.res,
                meta["namespace"],
                meta["name"],
                lambda obj: obj.__setitem__("status", status),
            )
