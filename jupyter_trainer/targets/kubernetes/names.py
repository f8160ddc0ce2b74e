"""Run ids, run names and parameter values made safe for Kubernetes metadata.

The API server refuses an object whose name is not a DNS label (RFC 1123, and RFC 1035 for
Services and TrainJobs: a letter first) or whose label values are not label values. A run
id may be 128 characters with dots and capitals; a run name may be anything printable.
Each function here returns the text unchanged when it is already valid, and otherwise a
readable prefix of it followed by a short hash of the original, so two different inputs
never meet in one name and the same input always gives the same name.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from ...core.redact import redact

MAX_LABEL = 63  # DNS labels and label values
HASH_CHARS = 8
LABEL_PREFIX = "jupyter-trainer/"  # our labels and annotations
RUN_ID_LABEL = LABEL_PREFIX + "run-id"
RUN_NAME_LABEL = LABEL_PREFIX + "run-name"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # the Kueue LocalQueue a Job or TrainJob waits in
MAX_ANNOTATION = 64 * 1024  # one annotation; the API's limit is 256 KiB for all of them

_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


def short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]


def dns_label(text: str, max_len: int = MAX_LABEL) -> str:
    """``text`` as an RFC 1035 label (``[a-z]([-a-z0-9]*[a-z0-9])?``, at most ``max_len``):
    unchanged when it is one, else lowercased, runs of other characters turned into one
    ``-``, a letter put first, cut to fit, and ``-<hash of text>`` appended."""
    if max_len < HASH_CHARS + 3:
        raise ValueError(f"a DNS label of at most {max_len} characters has no room for a hash")
    if len(text) <= max_len and _DNS_LABEL.fullmatch(text):
        return text
    base = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    if not base[:1].isalpha():
        base = ("x-" + base).rstrip("-")
    base = base[: max_len - HASH_CHARS - 1].rstrip("-")
    return f"{base}-{short_hash(text)}"


def label_value(text: str) -> str:
    """``text`` as a label value (at most 63 of ``[-A-Za-z0-9_.]``, alphanumeric at both
    ends): unchanged when it is one, else its allowed characters, cut to fit, then
    ``-<hash of text>``."""
    if len(text) <= MAX_LABEL and _LABEL_VALUE.fullmatch(text):
        return text
    base = re.sub(r"[^-A-Za-z0-9_.]+", "-", text)
    base = re.sub(r"^[^A-Za-z0-9]+", "", base)[: MAX_LABEL - HASH_CHARS - 1]
    base = re.sub(r"[^A-Za-z0-9]+$", "", base)
    return f"{base}-{short_hash(text)}" if base else short_hash(text)


def is_dns_label(text: str, max_len: int = MAX_LABEL) -> bool:
    return len(text) <= max_len and bool(_DNS_LABEL.fullmatch(text))


def is_label_value(text: str) -> bool:
    return len(text) <= MAX_LABEL and bool(_LABEL_VALUE.fullmatch(text))


# A run's objects are named "jt-<run>"; the Job's pods add "-<index>-<5 random>" to that
# and the Trainer's JobSet "-node-<i>-<j>-<5 random>", which must still be a DNS label.
OBJECT_NAME_MAX = 40


def object_name(run_id: str) -> str:
    """The name of every object of run ``run_id`` (the Job, its Service, the ConfigMap,
    the TrainJob): ``jt-`` and the run id as a DNS label, short enough for the names the
    controllers derive from it."""
    return dns_label(f"jt-{run_id}", OBJECT_NAME_MAX)


def run_labels(run_id: str, run_name: str) -> dict[str, str]:
    """The labels every object and pod of the run carries: ``kubectl get pods -l
    jupyter-trainer/run-id=<label>`` finds the run's pods."""
    return {
        RUN_ID_LABEL: label_value(run_id),
        RUN_NAME_LABEL: label_value(run_name),
        "app.kubernetes.io/managed-by": "jupyter-trainer",
    }


def annotation_json(value: Any) -> str:
    """``value`` as compact JSON for an annotation; one too large for the API is replaced
    by a note of its size and hash (the run's spec.json keeps the whole value)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if len(text.encode()) <= MAX_ANNOTATION:
        return text
    return json.dumps(
        {
            "truncated": True,
            "bytes": len(text.encode()),
            "sha256": hashlib.sha256(text.encode()).hexdigest(),
        }
    )


def run_annotations(run_id: str, run_name: str, params: Any) -> dict[str, str]:
    """What labels cannot hold: the exact run id and name, and the parameters as JSON, the
    secret ones redacted as spec.json records them (anyone who reads the objects reads it)."""
    return {
        RUN_ID_LABEL: run_id,
        RUN_NAME_LABEL: run_name,
        LABEL_PREFIX + "params": annotation_json(redact(params)),
    }
