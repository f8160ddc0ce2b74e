"""What a run's Kubernetes objects say about it, read from them as the API server returns
them: why the run still waits (a queue's condition on its Job or TrainJob, the scheduler's
words on a Pending pod), how it ended (the Job's or TrainJob's conditions, the first
container that exited non-zero), which pods are the run's and which node each one is.

Pure functions of the objects; the target (target.py) asks the cluster for them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .names import RUN_ID_LABEL, label_value, object_name

MAIN_KIND = {"trainjob": "TrainJob", "job": "Job"}
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"

Object = Mapping[str, Any]  # a Kubernetes object as the API server returns it


def waiting_reason(main: str, name: str, obj: Object | None) -> str:
    """Why a run has no pod yet: a condition of its Job or TrainJob (``obj``, of kind
    ``main``) that says (a queue such as Kueue suspends it until it is admitted), else that
    they are being made."""
    obj = obj or {}
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("status") == "True" and cond.get("message"):
            return f"{main} {name}: {cond.get('type')}: {cond['message']}"
    if (obj.get("spec") or {}).get("suspend"):
        return f"{main} {name} is suspended"
    return f"waiting for the {main}'s pods to be created"


def kueue_waiting(
    queue: str, workload: Object | None, pending: list[dict[str, Any]] | None
) -> dict[str, Any]:
    """Where a run stands in Kueue LocalQueue ``queue``: its Workload's reason for waiting
    (the QuotaReserved condition's message: which quota falls short, by how much), and its
    place among the queue's ``pending`` workloads (Kueue's visibility API, in admission
    order). Empty where Kueue has not made the Workload yet."""
    if workload is None:
        return {}
    name = (workload.get("metadata") or {}).get("name")
    found: dict[str, Any] = {"local_queue": queue, "workload": name}
    for cond in (workload.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "QuotaReserved" and cond.get("status") == "False":
            found["reason"] = f"Kueue workload {name}: {cond.get('message') or cond.get('reason')}"
    if pending is not None:
        names = [(item.get("metadata") or {}).get("name") for item in pending]
        if name in names:
            item = pending[names.index(name)]
            place = item.get("positionInLocalQueue")
            found["position"] = (place if isinstance(place, int) else names.index(name)) + 1
            found["pending"] = len(names)
    return found


def pending_reason(pod: Object, events: Callable[[str], list[dict[str, Any]]]) -> str:
    """Why a Pending pod waits: the scheduler's words (``0/4 nodes are available: ...``)
    from its PodScheduled condition or its latest FailedScheduling event (``events`` of a
    pod's name), else what its container waits for (an image pull)."""
    name = pod["metadata"]["name"]
    status = pod.get("status") or {}
    for cond in status.get("conditions") or []:
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("message")
        ):
            return f"pod {name}: {cond['message']}"
    failed = [e for e in events(name) if e.get("reason") == "FailedScheduling"]
    if failed:
        latest = max(failed, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
        return f"pod {name}: {latest.get('message', 'FailedScheduling')}"
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting:
            return f"pod {name}: {waiting.get('reason')} {waiting.get('message') or ''}".strip()
    return f"pod {name} is Pending"


def job_state(
    main: str,
    name: str,
    obj: Object | None,
    deleting: bool,
    failed_pod: Callable[[bool], dict[str, Any] | None],
) -> dict[str, Any]:
    """The run's end as its Job's or TrainJob's conditions say (``obj``, None once it is
    gone; ``deleting``: this run's teardown deleted it). ``failed_pod(fresh)`` is the first
    container of the run that exited non-zero (``first_failure`` of its pods)."""
    if obj is None:
        if deleting:
            return {
                "state": "deleted",
                "exit_code": None,
                "message": f"{main} {name} was deleted by this run's teardown",
            }
        return {"state": "gone", "exit_code": 1, "message": f"{main} {name} is gone"}
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("status") != "True":
            continue
        if cond.get("type") in ("Complete", "SuccessCriteriaMet"):
            return {"state": "completed", "exit_code": 0}
        if cond.get("type") == "Failed":
            failed = failed_pod(True)
            return {
                "state": "failed",
                "exit_code": (failed or {}).get("exit_code") or 1,
                "reason": cond.get("reason"),
                "message": cond.get("message"),
                **({"failed_pod": failed} if failed else {}),
            }
    # A TrainJob's pods restart in place (JobSet's restartPolicy OnFailure) until the
    # Job's backoffLimit: the first container that ended non-zero ends the run now.
    failed = failed_pod(False)
    if failed is not None:
        return {
            "state": "failed",
            "exit_code": failed["exit_code"],
            "reason": "ContainerFailed",
            "message": f"container {failed['container']} of pod {failed['pod']} exited "
            f"with code {failed['exit_code']}",
            "failed_pod": failed,
        }
    return {"state": "running"}


def first_failure(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The pod whose container ended first with a non-zero exit code, in its current
    state or, restarted in place since, its last one."""
    found = []
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            ends = [
                (cs.get("state") or {}).get("terminated") or {},
                (cs.get("lastState") or {}).get("terminated") or {},
            ]
            for term in ends:
                if term.get("exitCode"):
                    found.append(
                        {
                            "pod": pod["metadata"]["name"],
                            "container": cs.get("name"),
                            "exit_code": term["exitCode"],
                            "reason": term.get("reason"),
                            "restarts": cs.get("restartCount", 0),
                            "finished": str(term.get("finishedAt") or ""),
                        }
                    )
    return min(found, key=lambda f: f["finished"]) if found else None


def pod_labels(api: str, run_id: str) -> dict[str, str]:
    """A selector for the run's pods: our run-id label on a Job's; the JobSet's own label
    on a TrainJob's (set by the Trainer's JobSet whatever the runtime patches carry)."""
    if api == "trainjob":
        return {JOBSET_LABEL: object_name(run_id)}
    return {RUN_ID_LABEL: label_value(run_id)}


def node_number(pod: Object, mpi: bool) -> int:
    """The node a pod is, for its launcher log: its Job's completion index (under an MPI
    TrainJob the launcher pod is node 0 and the node pods follow it)."""
    meta = pod["metadata"]
    index = (meta.get("annotations") or {}).get(INDEX_ANNOTATION, "0")
    number = int(index) if str(index).isdigit() else 0
    if mpi and (meta.get("labels") or {}).get(REPLICATED_JOB_LABEL) != "launcher":
        number += 1
    return number


def describe_pod(pod: Object) -> str:
    """A pod as a leftover: its name and phase."""
    status = pod.get("status") or {}
    return (
        f"pod {pod['metadata']['name']} ({status.get('phase', 'unknown')}"
        + (", being deleted" if pod["metadata"].get("deletionTimestamp") else "")
        + ")"
    )
