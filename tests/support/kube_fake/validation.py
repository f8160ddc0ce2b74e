"""Validation of created objects: core kinds against the Kubernetes 1.37 OpenAPI schemas
(kubernetes-validate), the Trainer's kinds against their CRDs' openAPIV3Schema, plus the name,
label and Job rules the real API server checks in code."""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path

import jsonschema
import yaml
from kubernetes_validate.utils import ValidationError, validate

from .resources import Resource
from .store import ApiError

K8S_DIR = Path(__file__).resolve().parent / "schemas"  # the Trainer CRDs, vendored
CRD_FILES = {
    "TrainJob": "trainer.kubeflow.org_trainjobs.yaml",
    "ClusterTrainingRuntime": "trainer.kubeflow.org_clustertrainingruntimes.yaml",
    "TrainingRuntime": "trainer.kubeflow.org_clustertrainingruntimes.yaml",
}

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character (e.g. "
    "'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
    "'-', and must start and end with an alphanumeric character (e.g. 'my-name',  or "
    "'123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start "
    "with an alphabetic character, and end with an alphanumeric character (e.g. "
    "'my-name',  or 'abc-123', regex used for validation is "
    "'[a-z]([-a-z0-9]*[a-z0-9])?')"
)


def strict(schema):
    """The CRD schema as the API server applies it, strict: objects with ``properties``
    refuse other fields (the server would prune them silently; here they are mistakes)."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@functools.cache
def crd_validator(kind: str):
    doc = yaml.safe_load((K8S_DIR / CRD_FILES[kind]).read_text())
    version = next(v for v in doc["spec"]["versions"] if v.get("served"))
    schema = strict(version["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"type": "object"}
    if kind == "TrainingRuntime":
        schema["properties"]["kind"] = {"type": "string"}
    return jsonschema.Draft7Validator(schema)


class Invalid:
    """Collects field errors into the 422 Status the API server sends."""

    def __init__(self, kind: str, name: str):
        self.kind, self.name, self.causes = kind, name, []

    def add(self, field: str, message: str, reason: str = "FieldValueInvalid"):
        self.causes.append({"reason": reason, "message": message, "field": field})

    def raise_if_any(self):
        if not self.causes:
            return
        text = ", ".join(f"{c['field']}: {c['message']}" for c in self.causes)
        msg = f'{self.kind} "{self.name}" is invalid: ' + (
            f"[{text}]" if len(self.causes) > 1 else text
        )
        raise ApiError(
            422, "Invalid", msg, {"name": self.name, "kind": self.kind, "causes": self.causes}
        )


def _path(error) -> str:
    parts = []
    for p in error.absolute_path:
        if isinstance(p, int):
            parts[-1] = f"{parts[-1]}[{p}]" if parts else f"[{p}]"
        else:
            parts.append(str(p))
    return ".".join(parts) or "<root>"


def _schema(res: Resource, obj: dict, inv: Invalid):
    body = copy.deepcopy(obj)
    if res.group == "trainer.kubeflow.org":
        for error in crd_validator(res.kind).iter_errors(body):
            if error.validator == "additionalProperties":
                raise ApiError(
                    400, "BadRequest", f"strict decoding error: {error.message} at {_path(error)}"
                )
            inv.add(_path(error), f"Invalid value: {error.instance!r:.200}: {error.message:.300}")
        return
    try:
        validate(body, "1.37", strict=True)
    except ValidationError as error:
        if error.validator == "additionalProperties":
            raise ApiError(
                400, "BadRequest", f"strict decoding error: {error.message} at {_path(error)}"
            ) from None
        inv.add(_path(error), f"Invalid value: {error.instance!r:.200}: {error.message:.300}")


def _labels(field: str, labels: dict, inv: Invalid):
    for key, value in (labels or {}).items():
        prefix, _, name = key.rpartition("/")
        if (
            not QUALIFIED_NAME.match(name)
            or len(name) > 63
            or (prefix and (not DNS1123_SUBDOMAIN.match(prefix) or len(prefix) > 253))
        ):
            inv.add(
                f"{field}",
                f'Invalid value: "{key}": name part must consist of alphanumeric '
                "characters, '-', '_' or '.', and must start and end with an alphanumeric "
                "character",
            )
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
            inv.add(
                f"{field}",
                f'Invalid value: "{value}": a valid label must be an empty string '
                "or consist of alphanumeric characters, '-', '_' or '.', and must start and "
                "end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
                "'12345', regex used for validation is "
                "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
            )


def _name(res: Resource, name: str, inv: Invalid):
    if res.kind == "Service" or res.kind == "TrainJob":
        ok, msg, limit = DNS1035_LABEL.match(name or ""), DNS1035_MSG, 63
    elif res.kind in ("Namespace", "Job"):
        ok, msg, limit = DNS1123_LABEL.match(name or ""), LABEL_MSG, 63
    else:
        ok, msg, limit = DNS1123_SUBDOMAIN.match(name or ""), SUBDOMAIN_MSG, 253
    if not name:
        inv.add(
            "metadata.name",
            "Required value: name or generateName is required",
            "FieldValueRequired",
        )
    elif not ok:
        inv.add("metadata.name", f'Invalid value: "{name}": {msg}')
    elif len(name) > limit:
        inv.add(
            "metadata.name", f'Invalid value: "{name}": must be no more than {limit} characters'
        )


def _pod_spec(field: str, spec: dict, inv: Invalid):
    for key in ("hostname", "subdomain"):
        value = spec.get(key)
        if value is not None and (not DNS1123_LABEL.match(value) or len(value) > 63):
            inv.add(
                f"{field}.{key}",
                f'Invalid value: "{value}": {LABEL_MSG}'
                if DNS1123_LABEL.match(value) is None
                else f'Invalid value: "{value}": must be no more than 63 characters',
            )
    volumes = {v.get("name") for v in spec.get("volumes") or []}
    for group in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(group) or []):
            if not DNS1123_LABEL.match(c.get("name", "")):
                inv.add(
                    f"{field}.{group}[{i}].name", f'Invalid value: "{c.get("name")}": {LABEL_MSG}'
                )
            if not c.get("image"):
                inv.add(f"{field}.{group}[{i}].image", "Required value", "FieldValueRequired")
            for j, m in enumerate(c.get("volumeMounts") or []):
                if m.get("name") not in volumes:
                    inv.add(
                        f"{field}.{group}[{i}].volumeMounts[{j}].name",
                        f'Not found: "{m.get("name")}"',
                        "FieldValueNotFound",
                    )
            for j, e in enumerate(c.get("env") or []):
                if not e.get("name") or "=" in e["name"]:
                    inv.add(
                        f"{field}.{group}[{i}].env[{j}].name",
                        f'Invalid value: "{e.get("name")}": a valid environment variable name '
                        "must consist only of printable ASCII characters other than '='",
                    )
    if not spec.get("containers"):
        inv.add(f"{field}.containers", "Required value", "FieldValueRequired")


def _job(spec: dict, inv: Invalid):
    template = spec.get("template") or {}
    pod = template.get("spec") or {}
    policy = pod.get("restartPolicy")
    if policy not in ("Never", "OnFailure"):
        inv.add(
            "spec.template.spec.restartPolicy",
            f'Unsupported value: "{policy or "Always"}": supported values: "OnFailure", "Never"',
            "FieldValueNotSupported",
        )
    if spec.get("podFailurePolicy") and policy != "Never":
        inv.add(
            "spec.template.spec.restartPolicy",
            'Invalid value: "OnFailure": only "Never" is '
            "supported when podFailurePolicy is specified",
        )
    if spec.get("completionMode") == "Indexed" and spec.get("completions") is None:
        inv.add(
            "spec.completions",
            "Required value: when completion mode is Indexed",
            "FieldValueRequired",
        )
    _pod_spec("spec.template.spec", pod, inv)
    _labels("spec.template.metadata.labels", (template.get("metadata") or {}).get("labels"), inv)


def validate_object(res: Resource, obj: dict):
    meta = obj.get("metadata") or {}
    inv = Invalid(res.kind, meta.get("name") or meta.get("generateName", ""))
    _schema(res, obj, inv)
    inv.raise_if_any()
    _name(res, meta.get("name") or (meta.get("generateName", "") + "x0000"), inv)
    if res.namespaced and meta.get("namespace") and not DNS1123_LABEL.match(meta["namespace"]):
        inv.add("metadata.namespace", f'Invalid value: "{meta["namespace"]}": {LABEL_MSG}')
    _labels("metadata.labels", meta.get("labels"), inv)
    if res.kind == "Pod":
        _pod_spec("spec", obj.get("spec") or {}, inv)
    elif res.kind == "Job":
        _job(obj.get("spec") or {}, inv)
    elif res.kind == "ConfigMap":
        data = {**(obj.get("data") or {}), **(obj.get("binaryData") or {})}
        for key in data:
            if not re.match(r"^[-._a-zA-Z0-9]+$", key):
                inv.add(
                    "data",
                    f'Invalid value: "{key}": a valid config key must consist of '
                    "alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or "
                    "'KEY_NAME',  or 'key-name', regex used for validation is "
                    "'[-._a-zA-Z0-9]+')",
                )
        size = sum(len(k) + len(str(v)) for k, v in data.items())
        if size > 1048576:
            inv.add("", "Too long: must have at most 1048576 bytes", "FieldValueTooLong")
    inv.raise_if_any()
