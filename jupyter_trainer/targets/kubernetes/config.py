"""A ``kind = "kubernetes"`` entry of targets.toml, validated.

Every value that reaches a manifest is checked here, so a typo fails when the target is
added (``add_target`` builds the target) and never as an API server's 422 at the first run.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core.errors import TargetError

APIS = ("auto", "trainjob", "job")
KEYS = (
    "kubeconfig",
    "context",
    "namespace",
    "image",
    "python",
    "gpus_per_node",
    "resources",
    "node_selector",
    "tolerations",
    "service_account",
    "runtime",
    "mpi_runtime",
    "workdir_pvc",
    "workdir_local",
    "api",
    "env",
    "connect_timeout",
    "queue",
)
DEFAULT_RUNTIME = "torch-distributed"
DEFAULT_MPI_RUNTIME = "mpi-distributed"
GPU_RESOURCE = "nvidia.com/gpu"

_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_KEY = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_QUANTITY = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|[KMGTPE]i?|[mkMGTPE]|[un])?")
_RESOURCE = re.compile(
    r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_TOLERATION = {"key", "operator", "value", "effect", "tolerationSeconds"}
_OPERATORS = ("Exists", "Equal")
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True)
class KubeConfig:
    kubeconfig: str | None = None  # None: $KUBECONFIG, else ~/.kube/config
    context: str | None = None  # None: the kubeconfig's current context
    namespace: str | None = None  # None: the context's namespace, else "default"
    image: str | None = None  # None: the run environment's image
    python: str = "python"  # the image's interpreter
    gpus_per_node: int = 0
    resources: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # requests, limits
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    service_account: str | None = None
    runtime: str = DEFAULT_RUNTIME  # ClusterTrainingRuntime for torchrun and python
    mpi_runtime: str = DEFAULT_MPI_RUNTIME  # ... for mpirun and horovod (the mpi ML policy)
    workdir_pvc: str | None = None  # a ReadWriteMany claim holding the run folders
    workdir_local: str | None = None  # where this machine sees that claim, if it does
    api: str = "auto"
    env: Mapping[str, str] = field(default_factory=dict)
    connect_timeout: int = 30
    queue: str | None = None  # a Kueue LocalQueue: the run waits there until it is admitted

    @classmethod
    def from_config(cls, name: str, config: Mapping[str, Any]) -> KubeConfig:
        def fail(key: str, what: str) -> TargetError:
            return TargetError(f"target {name!r}: {key} {what}")

        unknown = sorted(set(config) - set(KEYS))
        if unknown:
            raise TargetError(
                f"target {name!r}: unknown key(s) {unknown}; a kubernetes target "
                f"takes {', '.join(KEYS)}"
            )
        for key in ("kubeconfig", "context", "image", "python"):
            value = config.get(key)
            if value is not None and (
                not isinstance(value, str) or not value or not value.isprintable()
            ):
                raise fail(key, f"must be a non-empty string, got {value!r}")
        image = config.get("image")
        if image is not None and not _IMAGE.fullmatch(image):
            raise fail(
                "image",
                f"{image!r} is not an image reference; write for example "
                'image = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"',
            )
        for key in (
            "namespace",
            "service_account",
            "workdir_pvc",
            "runtime",
            "mpi_runtime",
            "queue",
        ):
            value = config.get(key)
            if value is not None and (
                not isinstance(value, str)
                or len(value) > 253
                or not _SUBDOMAIN.fullmatch(value)
                or (key in ("namespace", "queue") and len(value) > 63)
            ):
                raise fail(
                    key,
                    f"must be a Kubernetes object name (lowercase letters, digits, "
                    f"'-' and '.'), got {value!r}",
                )
        local = config.get("workdir_local")
        if local is not None and (
            not isinstance(local, str) or not local.startswith("/") or not config.get("workdir_pvc")
        ):
            raise fail(
                "workdir_local",
                f"is the absolute path where this machine sees "
                f"workdir_pvc's volume (it needs workdir_pvc), got "
                f"{local!r}",
            )
        gpus = config.get("gpus_per_node", 0)
        if isinstance(gpus, bool) or not isinstance(gpus, int) or not 0 <= gpus <= 64:
            raise fail(
                "gpus_per_node",
                f"must be a whole number of GPUs from 0 to 64 (it asks "
                f"each pod for {GPU_RESOURCE}), got {gpus!r}",
            )
        api = config.get("api", "auto")
        if api not in APIS:
            raise fail(
                "api",
                f"must be one of {', '.join(APIS)} (auto: a Kubeflow TrainJob when "
                f"the cluster serves them, else an Indexed Job), got {api!r}",
            )
        timeout = config.get("connect_timeout", 30)
        if isinstance(timeout, bool) or not isinstance(timeout, int) or not 1 <= timeout <= 600:
            raise fail(
                "connect_timeout", f"must be a number of seconds from 1 to 600, got {timeout!r}"
            )
        return cls(
            kubeconfig=config.get("kubeconfig"),
            context=config.get("context"),
            namespace=config.get("namespace"),
            image=image,
            python=config.get("python", "python"),
            gpus_per_node=gpus,
            resources=_resources(fail, config.get("resources", {})),
            node_selector=_string_table(
                fail,
                "node_selector",
                config.get("node_selector", {}),
                _LABEL_KEY,
                _LABEL_VALUE,
                'node_selector = { "gpu-type" = "a100" }',
            ),
            tolerations=_tolerations(fail, config.get("tolerations", [])),
            service_account=config.get("service_account"),
            runtime=config.get("runtime", DEFAULT_RUNTIME),
            mpi_runtime=config.get("mpi_runtime", DEFAULT_MPI_RUNTIME),
            workdir_pvc=config.get("workdir_pvc"),
            workdir_local=local,
            api=api,
            env=_string_table(
                fail, "env", config.get("env", {}), _ENV_NAME, None, 'env = { NCCL_DEBUG = "INFO" }'
            ),
            connect_timeout=timeout,
            queue=config.get("queue"),
        )

    def kubeconfig_path(self) -> Path:
        """The kubeconfig file: the setting, else the first of ``$KUBECONFIG``, else
        ``~/.kube/config``."""
        if self.kubeconfig:
            return Path(self.kubeconfig).expanduser()
        listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
        return Path(listed[0]).expanduser() if listed else Path.home() / ".kube" / "config"


def _string_table(
    fail: Any, key: str, value: Any, key_re: re.Pattern, value_re: re.Pattern | None, example: str
) -> dict[str, str]:
    if not isinstance(value, dict):
        raise fail(key, f"must be a table, e.g. {example}; got {value!r}")
    for k, v in value.items():
        if not isinstance(k, str) or not key_re.fullmatch(k) or len(k) > 253:
            raise fail(key, f"has an invalid name {k!r}; e.g. {example}")
        if not isinstance(v, str) or (
            value_re is not None and (len(v) > 63 or not value_re.fullmatch(v))
        ):
            raise fail(key, f"{k}: {v!r} is not a valid value; e.g. {example}")
    return dict(value)


def _quantity(fail: Any, where: str, value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return str(value)
    if not isinstance(value, str) or not _QUANTITY.fullmatch(value) or value.startswith("-"):
        raise fail(
            "resources",
            f'{where}: {value!r} is not a quantity; write for example cpu = "4", memory = "16Gi"',
        )
    return value


def _resources(fail: Any, value: Any) -> dict[str, dict[str, str]]:
    """``{cpu = "4", memory = "16Gi"}`` (requested and the limit) or ``{requests = {...},
    limits = {...}}``."""
    example = 'resources = { cpu = "4", memory = "16Gi" }'
    if not isinstance(value, dict):
        raise fail("resources", f"must be a table, e.g. {example}; got {value!r}")
    if set(value) & {"requests", "limits"}:
        if set(value) - {"requests", "limits"}:
            raise fail("resources", "takes either requests/limits tables or quantities, not both")
        parts = {part: value.get(part, {}) for part in ("requests", "limits")}
    else:
        parts = {"requests": value, "limits": value}
    out: dict[str, dict[str, str]] = {}
    for part, table in parts.items():
        if not isinstance(table, dict):
            raise fail("resources", f"{part} must be a table, e.g. {example}")
        for name, amount in table.items():
            if not isinstance(name, str) or not _RESOURCE.fullmatch(name):
                raise fail(
                    "resources",
                    f"{name!r} is not a resource name (cpu, memory, {GPU_RESOURCE}, ...)",
                )
            if name == GPU_RESOURCE:
                raise fail("resources", f"set GPUs with gpus_per_node, not {GPU_RESOURCE}")
            out.setdefault(part, {})[name] = _quantity(fail, f"{part}.{name}", amount)
    return out


def _tolerations(fail: Any, value: Any) -> tuple[dict[str, Any], ...]:
    example = (
        'tolerations = [{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }]'
    )
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise fail("tolerations", f"must be a list of tables, e.g. {example}")
    for t in value:
        extra = set(t) - _TOLERATION
        if extra:
            raise fail(
                "tolerations",
                f"unknown field(s) {sorted(extra)}; a toleration has "
                f"{', '.join(sorted(_TOLERATION))}",
            )
        for k in ("key", "value"):
            if k in t and not isinstance(t[k], str):
                raise fail("tolerations", f"{k} must be a string, got {t[k]!r}")
        if "key" in t and t["key"] and not _LABEL_KEY.fullmatch(t["key"]):
            raise fail("tolerations", f"key {t['key']!r} is not a taint key")
        if t.get("operator", "Equal") not in _OPERATORS:
            raise fail("tolerations", f"operator must be one of {', '.join(_OPERATORS)}")
        if t.get("operator") == "Exists" and t.get("value"):
            raise fail("tolerations", "operator Exists takes no value")
        if "effect" in t and t["effect"] not in _EFFECTS:
            raise fail("tolerations", f"effect must be one of {', '.join(_EFFECTS)}")
        seconds = t.get("tolerationSeconds")
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int)):
            raise fail("tolerations", f"tolerationSeconds must be whole seconds, got {seconds!r}")
    return tuple(dict(t) for t in value)
