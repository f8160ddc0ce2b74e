"""A live session on Kubernetes: its requests go to the pods through the API server.

The notebook machine cannot in general be reached from the cluster, and a pod's run folder
is its own (an emptyDir), so the supervisor writes each message of the session (a request's
files, an interrupt, the stop) as a ConfigMap of the run (``request_config_map``: labelled
with the run and its order, owned by the run's Job or TrainJob, so that deleting the run
deletes them). Every pod's ``pod.py`` lists and watches those ConfigMaps with its service
account's token (``SessionRequests`` in ``rankside/programs/kube_pod.py``), writes their files
into its run folder, in order, and wakes its ranks. Reading ConfigMaps is what a session's
pods may do beyond an ordinary run's: a session run has a ServiceAccount of its own (unless
the target names one), a Role that may get, list and watch ConfigMaps in the namespace, and
a RoleBinding of the two (``access_manifests``), created before its pods and deleted with
its other objects. The ranks' readiness, results and the session's end come back on the pod
logs as the run's other files do (stream.py).

A ConfigMap holds at most 1 MiB: a request whose files are more than that is replaced by a
cell that raises, on every rank it names, the error that says so.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any, Protocol

from ...core.errors import TargetError
from ...core.spec import RunSpec
from ...nodes.session_relay import SessionRelay
from ...rankside.programs.kube_pod import SESSION_OF, SESSION_SEQ, session_of
from .names import RUN_ID_LABEL, label_value, object_name


class Objects(Protocol):
    """What the relay asks of the cluster (``cluster.Cluster``)."""

    def get(self, kind: str, name: str) -> dict[str, Any] | None: ...

    def create(self, manifest: dict[str, Any]) -> Any: ...


# The API server refuses a ConfigMap whose keys and values are over 1 MiB; room for the rest.
MESSAGE_LIMIT = 1024 * 1024 - 8 * 1024
RBAC_API = "rbac.authorization.k8s.io/v1"


def is_session(spec: RunSpec, run_dir: str | Path) -> bool:
    """Whether the run's entry script is a live session's loop (api/sessions.py writes it)."""
    try:
        script = (Path(run_dir) / "code" / spec.code.entry).read_text(errors="replace")
    except OSError:
        return False
    return "session_loop.main()" in script


def access_manifests(metadata: dict[str, Any], service_account: str | None) -> list[dict]:
    """What lets a session's pods read its request ConfigMaps: a ServiceAccount (where
    ``service_account``, the target's own, is not given), a Role and a RoleBinding."""
    name, namespace = metadata["name"], metadata["namespace"]
    docs: list[dict[str, Any]] = []
    if not service_account:
        docs.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(metadata)})
    docs.append(
        {
            "apiVersion": RBAC_API,
            "kind": "Role",
            "metadata": dict(metadata),
            "rules": [
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}
            ],
        }
    )
    docs.append(
        {
            "apiVersion": RBAC_API,
            "kind": "RoleBinding",
            "metadata": dict(metadata),
            "roleRef": {"apiGroup": RBAC_API.split("/")[0], "kind": "Role", "name": name},
            "subjects": [
                {"kind": "ServiceAccount", "name": service_account or name, "namespace": namespace}
            ],
        }
    )
    return docs


def request_config_map(
    run_id: str, seq: int, namespace: str, owner: dict[str, Any], body: dict[str, Any]
) -> dict[str, Any]:
    """Message ``seq`` of session ``run_id`` (a ``SessionRelay`` body) as a ConfigMap owned
    by ``owner`` (the run's Job or TrainJob): ``data["message.json"]`` names the files and the
    sockets to wake, ``binaryData["<i>"]`` is file i. TargetError where it is over 1 MiB."""
    session = body["session"]
    files: dict[str, str] = session["files"]  # path -> base64, as the relay sends them
    message = {"files": list(files), "wake": session["wake"]}
    data = {"message.json": json.dumps(message, separators=(",", ":"))}
    binary = {str(i): files[rel] for i, rel in enumerate(files)}
    size = sum(len(k) + len(v) for k, v in data.items()) + sum(
        len(k) + len(v) for k, v in binary.items()
    )
    if size > MESSAGE_LIMIT:
        raw = sum(len(base64.b64decode(v)) for v in files.values())
        raise TargetError(
            f"this request is {raw / 2**20:.2f} MiB ({size / 2**20:.2f} MiB in base64), more "
            "than a Kubernetes ConfigMap holds (1 MiB), which is how requests reach the pods: "
            "push the values one at a time, or make the cell carry less (read large data "
            "from storage on the ranks instead)"
        )
    meta = owner["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{object_name(run_id)}-s{seq}",
            "namespace": namespace,
            "labels": {
                RUN_ID_LABEL: label_value(run_id),
                SESSION_OF: session_of(run_id),
                SESSION_SEQ: str(seq),
            },
            "ownerReferences": [
                {
                    "apiVersion": owner["apiVersion"],
                    "kind": owner["kind"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                }
            ],
        },
        "immutable": True,
        "data": data,
        "binaryData": binary,
    }


def too_big(body: dict[str, Any], error: str) -> dict[str, Any]:
    """A request that did not fit, as a cell that raises ``error`` on the ranks it names
    (the same request number, so the requests after it still run)."""
    files = body["session"]["files"]
    last = next((rel for rel in reversed(files) if rel.endswith(".json")), None)
    if last is None:
        raise TargetError(error)
    request = json.loads(base64.b64decode(files[last]))
    request.update(op="run", params={})
    folder = last[: -len(".json")]
    cell = f"raise RuntimeError({error!r})\n"
    stand_in = {
        f"{folder}/cell.py": base64.b64encode(cell.encode()).decode(),
        last: base64.b64encode(json.dumps(request).encode()).decode(),
    }
    return {"session": {**body["session"], "files": stand_in}}


class KubeSessionRelay:
    """What of one run's ``session/`` folder has gone to its pods as ConfigMaps."""

    def __init__(
        self, cluster: Objects, handle: dict[str, Any], run_dir: str, run_id: str, world: int
    ) -> None:
        self.cluster = cluster
        self.handle = handle
        self.run_id = run_id
        self.relay = SessionRelay(run_dir, run_id, world)
        self.seq = 0  # messages 1..seq are in the cluster
        self.owner: dict[str, Any] | None = None

    def pump(self) -> None:
        """Every new request, interrupt and stop, as ConfigMaps (what fails now is written
        at a later pump)."""
        if self.relay.folder.is_dir():
            self.relay.pump([self])

    def request(self, body: dict[str, Any]) -> bool:
        """One relay message into the cluster; False where it could not be written yet."""
        try:
            if self.owner is None:
                kind = "TrainJob" if self.handle["api"] == "trainjob" else "Job"
                self.owner = self.cluster.get(kind, self.handle["name"])
                if self.owner is None:
                    return False
            namespace = self.handle["namespace"]
            try:
                manifest = request_config_map(
                    self.run_id, self.seq + 1, namespace, self.owner, body
                )
            except TargetError as exc:
                manifest = request_config_map(
                    self.run_id, self.seq + 1, namespace, self.owner, too_big(body, str(exc))
                )
            try:
                self.cluster.create(manifest)
            except TargetError:
                # written, though its answer was lost? (a name is never used twice)
                if self.cluster.get("ConfigMap", manifest["metadata"]["name"]) is None:
                    return False
        except TargetError:
            return False
        self.seq += 1
        return True
