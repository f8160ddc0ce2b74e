"""The API server, through lightkube: the few calls the target makes, each turning the
client's errors into a ``TargetError`` that names the setting to fix.

lightkube is imported here only, on first use, so that ``import jupyter_trainer`` and the
other targets never pay for it and a missing install is said with its fix.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ...core.errors import TargetError
from .config import KubeConfig
from .manifests import TRAINER_API

INSTALL = "pip install 'jupyter_trainer[kubernetes]'"


def require_lightkube() -> None:
    import importlib.util

    if importlib.util.find_spec("lightkube") is None:
        raise TargetError(f"the kubernetes target needs the lightkube client: {INSTALL}")


KUEUE_API = "kueue.x-k8s.io/v1beta1"
VISIBILITY_API = "visibility.kueue.x-k8s.io/v1beta1"


def _pending_workloads() -> Any:
    """Kueue's visibility API: a LocalQueue's ``pendingworkloads``, in the order Kueue will
    admit them (positions counted from 0)."""
    from lightkube.core import resource as res

    group, version = VISIBILITY_API.split("/")

    class PendingWorkloads(dict, res.NamespacedSubResource):
        """The answer is kept as the dict it is (lightkube wraps a dict type's answers)."""

        _api_info = res.ApiInfo(
            resource=res.ResourceDef(group, version, "PendingWorkloadsSummary"),
            parent=res.ResourceDef(group, version, "LocalQueue"),
            plural="localqueues",
            verbs=["get"],
            action="pendingworkloads",
        )

    return PendingWorkloads


def _resource(kind: str) -> Any:
    if kind == "Workload":
        from lightkube.generic_resource import create_namespaced_resource

        group, version = KUEUE_API.split("/")
        return create_namespaced_resource(group, version, "Workload", "workloads")
    if kind == "TrainJob":
        from lightkube.generic_resource import create_namespaced_resource

        group, version = TRAINER_API.split("/")
        return create_namespaced_resource(group, version, "TrainJob", "trainjobs")
    from lightkube.resources.batch_v1 import Job
    from lightkube.resources.core_v1 import ConfigMap, Event, Pod, Secret, Service, ServiceAccount
    from lightkube.resources.rbac_authorization_v1 import Role, RoleBinding

    return {
        "Job": Job,
        "ConfigMap": ConfigMap,
        "Secret": Secret,
        "Service": Service,
        "Pod": Pod,
        "Event": Event,
        "ServiceAccount": ServiceAccount,
        "Role": Role,
        "RoleBinding": RoleBinding,
    }[kind]


class Cluster:
    """One client for one target's cluster (the kubeconfig, context and namespace of it)."""

    def __init__(self, cfg: KubeConfig, target: str) -> None:
        self.cfg = cfg
        self.target = target
        self._client: Any = None
        self._namespace: str | None = None

    def _fail(self, what: str, exc: BaseException) -> TargetError:
        message = getattr(getattr(exc, "status", None), "message", None) or str(exc)
        return TargetError(f"target {self.target!r}: {what}: {' '.join(message.split())[:500]}")

    @property
    def client(self) -> Any:
        if self._client is None:
            require_lightkube()
            import httpx2  # lightkube's HTTP client
            from lightkube import Client, ConfigError
            from lightkube import KubeConfig as LightKubeConfig

            path = self.cfg.kubeconfig_path()
            try:
                single = LightKubeConfig.from_file(path).get(context_name=self.cfg.context)
            except ConfigError as exc:
                raise TargetError(
                    f"target {self.target!r}: cannot use kubeconfig {path}: {exc}; "
                    'set kubeconfig = "PATH" (and context) in the target, or '
                    "$KUBECONFIG"
                ) from None
            if single is None:  # lightkube answers None only when given a default
                raise TargetError(
                    f"target {self.target!r}: kubeconfig {path} names no context to use; "
                    'set context = "NAME" in the target'
                )
            self._namespace = self.cfg.namespace or single.namespace
            self._client = Client(
                config=single,
                namespace=self._namespace,
                timeout=httpx2.Timeout(float(self.cfg.connect_timeout)),
                field_manager="jupyter-trainer",
            )
        return self._client

    def close(self) -> None:
        """End the client's connections (following pod logs too); never raises."""
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:
                pass

    @property
    def namespace(self) -> str:
        self.client  # noqa: B018 (reads the context's namespace)
        return self._namespace or "default"

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from lightkube import ApiError

        try:
            return fn(*args, **kwargs)
        except ApiError:
            raise
        except Exception as exc:  # connection refused, TLS, timeouts: httpx2's own errors
            raise self._fail(
                f"{what} (is the cluster at the kubeconfig's server reachable?)", exc
            ) from exc

    def serves_trainjobs(self) -> bool:
        """Whether the cluster serves Kubeflow Trainer's TrainJob API."""
        from lightkube import ApiError

        client, namespace = self.client, self.namespace  # a bad kubeconfig says so itself
        try:
            self._call(
                "asking for the TrainJob API",
                lambda: next(
                    iter(client.list(_resource("TrainJob"), namespace=namespace, chunk_size=1)),
                    None,
                ),
            )
        except ApiError as exc:
            if exc.status.code == 404:
                return False
            raise self._fail("asking for the TrainJob API", exc) from exc
        return True

    def create(self, manifest: dict[str, Any]) -> None:
        from lightkube import ApiError
        from lightkube.codecs import from_dict

        _resource(manifest["kind"])  # a generic kind must be known before from_dict
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        try:
            self._call(f"creating {kind} {name}", self.client.create, from_dict(manifest))
        except ApiError as exc:
            raise self._fail(f"the API server refused {kind} {name}", exc) from exc

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        from lightkube import ApiError

        try:
            obj = self._call(
                f"reading {kind} {name}",
                self.client.get,
                _resource(kind),
                name,
                namespace=self.namespace,
            )
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise self._fail(f"reading {kind} {name}", exc) from exc
        return obj if isinstance(obj, dict) else obj.to_dict()

    def delete(self, kind: str, name: str, grace: int | None = None) -> bool:
        """Delete with foreground propagation (the pods go before the owner); False when
        it was already gone."""
        from lightkube import ApiError
        from lightkube.types import CascadeType

        try:
            self._call(
                f"deleting {kind} {name}",
                self.client.delete,
                _resource(kind),
                name,
                namespace=self.namespace,
                grace_period=grace,
                cascade=CascadeType.FOREGROUND,
            )
        except ApiError as exc:
            if exc.status.code == 404:
                return False
            raise self._fail(f"deleting {kind} {name}", exc) from exc
        return True

    def pods(self, labels: dict[str, str]) -> list[dict[str, Any]]:
        from lightkube import ApiError

        try:
            found = self._call(
                "listing the run's pods",
                lambda: list(
                    self.client.list(_resource("Pod"), namespace=self.namespace, labels=labels)
                ),
            )
        except ApiError as exc:
            raise self._fail("listing the run's pods", exc) from exc
        return [p.to_dict() for p in found]

    def workload(self, owner_kind: str, owner: str) -> dict[str, Any] | None:
        """The Kueue Workload of the run's Job or TrainJob; None where Kueue has made none
        (yet), or the cluster does not serve Kueue's API."""
        from lightkube import ApiError

        try:
            found = self._call(
                "listing Kueue's workloads",
                lambda: list(self.client.list(_resource("Workload"), namespace=self.namespace)),
            )
        except ApiError:
            return None
        for obj in found:
            wl = obj if isinstance(obj, dict) else obj.to_dict()
            refs = (wl.get("metadata") or {}).get("ownerReferences") or []
            if any(r.get("kind") == owner_kind and r.get("name") == owner for r in refs):
                return wl
        return None

    def pending_workloads(self, queue: str) -> list[dict[str, Any]] | None:
        """What waits in LocalQueue ``queue`` before Kueue admits it, in order; None where
        the cluster does not serve Kueue's visibility API."""
        from lightkube import ApiError

        try:
            summary = self._call(
                f"reading LocalQueue {queue}'s pending workloads",
                self.client.get,
                _pending_workloads(),
                queue,
                namespace=self.namespace,
            )
        except ApiError:
            return None
        return list((summary or {}).get("items") or [])

    def events(self, pod: str) -> list[dict[str, Any]]:
        from lightkube import ApiError

        try:
            found = self._call(
                "reading a pod's events",
                lambda: list(
                    self.client.list(
                        _resource("Event"),
                        namespace=self.namespace,
                        fields={"involvedObject.name": pod},
                    )
                ),
            )
        except ApiError:
            return []
        return [e.to_dict() for e in found]

    def log_lines(self, pod: str, previous: bool = False) -> Iterator[bytes]:
        """The pod's log, followed until the container ends; with ``previous``, the whole log
        of the container's instance before the current one (the kubelet keeps that one after
        a restart in place)."""
        lines = (
            self._previous_log(pod)
            if previous
            else self.client.log(pod, namespace=self.namespace, follow=True)
        )
        for line in lines:
            yield line.encode("utf-8", "surrogateescape")

    def _previous_log(self, pod: str) -> Iterator[str]:
        """``GET .../log?previous=true``: lightkube's ``Client.log`` has no such parameter,
        so its request is built here the way ``Client.log`` builds its own."""
        from lightkube.core.internal_resources import core_v1

        inner = self.client._client
        request = inner.prepare_request(
            "get", core_v1.PodLog, name=pod, namespace=self.namespace, params={"previous": "true"}
        )
        response = inner.send(inner.build_adapter_request(request))
        inner.raise_for_status(response)
        return (line + "\n" for line in response.iter_lines())

    def pod_instance(self, pod: str) -> tuple[str, int, bool] | None:
        """The pod's phase, how many times its container restarted in place, and whether
        that instance has started (it has not while it waits to be created or restarted);
        None once the pod is gone."""
        found = self.get("Pod", pod)
        if found is None:
            return None
        status = found.get("status") or {}
        containers = status.get("containerStatuses") or [{}]
        state = containers[0].get("state") or {}
        started = "running" in state or "terminated" in state
        return status.get("phase") or "Pending", containers[0].get("restartCount") or 0, started
