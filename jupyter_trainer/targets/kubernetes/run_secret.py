"""A run's secret values on Kubernetes. Its spec.json (in the run's ConfigMap, which anyone
who may read the namespace's ConfigMaps reads) records its secret params and variables
redacted; their values, the run's ``secrets.json`` (``rankside.rank.run_secrets``), travel in a
``v1`` Secret of the run's name, created first and deleted with the run's other objects, and
mounted owner-only (0400) in its pods, where pod.py copies it into the run folder
(``rankside.programs.kube_pod.copy_secrets``)."""

from __future__ import annotations

import base64
import json
import posixpath
from typing import Any

from ...core.redact import MASK
from ...core.spec import RunSpec
from ...rankside.programs.kube_pod import SECRETS_FILE
from ...rankside.rank import run_secrets

VOLUME = "jt-secrets"


def secrets_json(spec: RunSpec, run_dir: str) -> str | None:
    """The run's ``secrets.json`` for its Secret; None when it has no secrets. Where the run
    folder has none to read (a dry run), the Secret shows which ones, redacted."""
    found = run_secrets.files(run_dir).get(run_secrets.FILE)
    if found is not None or not spec.secrets:
        return found
    shown: dict[str, dict[str, str]] = {kind: {} for kind in run_secrets.KINDS}
    for entry in spec.secrets:
        kind, _, name = entry.partition(".")
        shown.setdefault(kind, {})[name] = MASK
    return json.dumps(shown)


def secret(metadata: dict[str, Any], text: str) -> dict[str, Any]:
    """The Secret holding ``text`` (the run's ``secrets.json``)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "Opaque",
        "immutable": True,
        "data": {posixpath.basename(SECRETS_FILE): base64.b64encode(text.encode()).decode()},
    }


def volume(name: str) -> dict[str, Any]:
    """The pods' volume of the Secret ``name``: its file readable by its owner alone."""
    return {"name": VOLUME, "secret": {"secretName": name, "defaultMode": 0o400}}


def mount() -> dict[str, Any]:
    return {"name": VOLUME, "mountPath": posixpath.dirname(SECRETS_FILE), "readOnly": True}
