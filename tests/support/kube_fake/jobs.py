"""The Job controller, for Indexed and NonIndexed batch/v1 Jobs."""

from __future__ import annotations

import copy
import uuid

from .store import ApiError, now

INDEX_KEY = "batch.kubernetes.io/job-completion-index"


def _cond(type_: str, reason: str, message: str) -> dict:
    t = now()
    return {
        "type": type_,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": t,
        "lastTransitionTime": t,
    }


def terminal(job: dict) -> str | None:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c["type"] in ("Complete", "Failed") and c["status"] == "True":
            return c["type"]
    return None


def _ranges(indexes: set[int]) -> str:
    out, run = [], []
    for i in sorted(indexes):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [i]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def _exit_codes(pod: dict) -> list[tuple[str, int]]:
    out = []
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term:
            out.append((cs["name"], term.get("exitCode", 0)))
    return out


def _policy_match(policy: dict | None, pod: dict):
    """(action, message) of the first podFailurePolicy rule the failed pod matches."""
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    for i, rule in enumerate((policy or {}).get("rules") or []):
        codes = rule.get("onExitCodes")
        if codes:
            for cname, code in _exit_codes(pod):
                if code == 0 or (codes.get("containerName") and codes["containerName"] != cname):
                    continue
                inside = code in codes.get("values", [])
                if inside == (codes.get("operator") == "In"):
                    return rule["action"], (
                        f"Container {cname} for pod {ns}/{name} failed with exit "
                        f"code {code} matching {rule['action']} rule at index {i}"
                    )
        for pc in rule.get("onPodConditions") or []:
            for c in (pod.get("status") or {}).get("conditions") or []:
                if c["type"] == pc["type"] and c["status"] == pc.get("status", "True"):
                    return rule["action"], (
                        f"Pod {ns}/{name} has condition {c['type']} matching "
                        f"{rule['action']} rule at index {i}"
                    )
    return None, None


class JobController:
    def __init__(self, cluster):
        self.cluster = cluster
        self.res = cluster.registry.find("batch", "v1", "jobs")
        self.pod_res = cluster.registry.find("", "v1", "pods")
        self.counted: dict[str, set] = {}  # job uid -> uids of failed/succeeded pods counted

    def sync(self):
        jobs, _ = self.cluster.store.list(self.res)
        for job in jobs:
            self._sync(job)

    def _pods(self, job):
        pods, _ = self.cluster.store.list(self.pod_res, job["metadata"]["namespace"])
        uid = job["metadata"]["uid"]
        return [
            p
            for p in pods
            if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or [])
        ]

    def _sync(self, job: dict):
        meta, spec = job["metadata"], job["spec"]
        if meta.get("deletionTimestamp") or spec.get("suspend"):
            return
        pods = self._pods(job)
        status = copy.deepcopy(job.get("status") or {})
        done = terminal(job)
        active = [
            p
            for p in pods
            if p["status"].get("phase") not in ("Succeeded", "Failed")
            and not p["metadata"].get("deletionTimestamp")
        ]
        if done:
            if done == "Failed":
                self._delete_active(job, active)
            return
        indexed = spec.get("completionMode") == "Indexed"
        counted = self.counted.setdefault(meta["uid"], set())
        succeeded_idx = set(int(i) for i in _ranges_parse(status.get("completedIndexes", "")))
        failure = None
        for pod in pods:
            puid, phase = pod["metadata"]["uid"], pod["status"].get("phase")
            if puid in counted or phase not in ("Succeeded", "Failed"):
                continue
            counted.add(puid)
            if phase == "Succeeded":
                status["succeeded"] = status.get("succeeded", 0) + 1
                if indexed:
                    succeeded_idx.add(int(pod["metadata"]["annotations"][INDEX_KEY]))
                continue
            action, message = _policy_match(spec.get("podFailurePolicy"), pod)
            if action == "Ignore":
                continue
            status["failed"] = status.get("failed", 0) + 1
            if action == "FailJob" and not failure:
                failure = ("PodFailurePolicy", message)
        limit = spec.get("backoffLimit", 6)
        restarts = sum(
            cs.get("restartCount", 0)
            for p in active
            for cs in (p["status"].get("initContainerStatuses") or [])
            + (p["status"].get("containerStatuses") or [])
        )
        on_failure = spec["template"]["spec"].get("restartPolicy") == "OnFailure"
        if not failure and (
            status.get("failed", 0) > limit
            or (on_failure and (restarts > 0 if limit == 0 else restarts >= limit))
        ):
            failure = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
        if indexed:
            status["completedIndexes"] = _ranges(succeeded_idx)
        complete = (
            len(succeeded_idx) >= spec["completions"]
            if indexed
            else status.get("succeeded", 0) >= (spec.get("completions") or 1)
        )
        status.setdefault("startTime", now())
        conditions = status.setdefault("conditions", [])
        if failure:
            conditions += [_cond("FailureTarget", *failure), _cond("Failed", *failure)]
            self.cluster.event(job, "Warning", failure[0], failure[1], "job-controller")
            self._delete_active(job, active)
            active = []
        elif complete and not active:
            conditions += [
                _cond(
                    "SuccessCriteriaMet",
                    "CompletionsReached",
                    "Reached expected number of completions",
                ),
                _cond("Complete", "CompletionsReached", "Reached expected number of completions"),
            ]
            status["completionTime"] = now()
            self.cluster.event(job, "Normal", "Completed", "Job completed", "job-controller")
        elif not complete:
            active += self._create_pods(job, active, succeeded_idx, status.get("succeeded", 0))
        status["active"] = len(active)
        status["ready"] = sum(1 for p in active if p["status"].get("phase") == "Running")
        status["terminating"] = sum(1 for p in pods if p["metadata"].get("deletionTimestamp"))
        status["uncountedTerminatedPods"] = {}
        if not conditions:
            status.pop("conditions")

        def change(obj):
            obj["status"] = status

        if status != job.get("status"):
            self.cluster.store.mutate(self.res, meta["namespace"], meta["name"], change)

    def _delete_active(self, job, active):
        for pod in active:
            self.cluster.delete(
                self.pod_res,
                pod["metadata"]["namespace"],
                pod["metadata"]["name"],
                "Background",
                None,
            )
            self.cluster.event(
                job,
                "Normal",
                "SuccessfulDelete",
                f"Deleted pod: {pod['metadata']['name']}",
                "job-controller",
            )

    def _create_pods(self, job, active, succeeded_idx, succeeded) -> list[dict]:
        spec = job["spec"]
        room = spec["parallelism"] - len(active)
        indexed = spec.get("completionMode") == "Indexed"
        if indexed:
            busy = {int(p["metadata"]["annotations"][INDEX_KEY]) for p in active}
            todo = [
                i for i in range(spec["completions"]) if i not in busy and i not in succeeded_idx
            ]
        else:
            todo = [None] * max(
                0, min(room, (spec.get("completions") or 1) - succeeded - len(active))
            )
        created = []
        for index in todo[: max(room, 0)]:
            pod = self._pod(job, index)
            try:
                created.append(self.cluster.create(self.pod_res, pod))
            except ApiError as exc:
                self.cluster.event(
                    job,
                    "Warning",
                    "FailedCreate",
                    f"Error creating: {exc.message}",
                    "job-controller",
                )
                continue
            self.cluster.event(
                job,
                "Normal",
                "SuccessfulCreate",
                f"Created pod: {created[-1]['metadata']['name']}",
                "job-controller",
            )
        return created

    def _pod(self, job, index):
        meta = job["metadata"]
        template = copy.deepcopy(job["spec"]["template"])
        tmeta, spec = template.get("metadata") or {}, template["spec"]
        labels, annotations = dict(tmeta.get("labels") or {}), dict(tmeta.get("annotations") or {})
        base = meta["name"] if index is None else f"{meta['name']}-{index}"
        if index is not None:
            labels[INDEX_KEY] = annotations[INDEX_KEY] = str(index)
            spec["hostname"] = base
            env = {
                "name": "JOB_COMPLETION_INDEX",
                "valueFrom": {
                    "fieldRef": {"apiVersion": "v1", "fieldPath": f"metadata.labels['{INDEX_KEY}']"}
                },
            }
            for c in (spec.get("initContainers") or []) + spec.get("containers", []):
                c["env"] = [env] + [e for e in c.get("env") or [] if e["name"] != env["name"]]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "spec": spec,
            "metadata": {
                "name": f"{base}-{uuid.uuid4().hex[:5]}",
                "namespace": meta["namespace"],
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
        }


def _ranges_parse(text: str):
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        yield from range(int(lo), int(hi or lo) + 1)
