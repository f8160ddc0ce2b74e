"""The kubernetes target: Kubeflow Trainer TrainJobs, or Indexed Jobs with a headless Service.

- ``target.py``: ``KubernetesTarget``, its hooks from ``check`` to ``leftovers``;
- ``config.py``: a ``kind = "kubernetes"`` entry of targets.toml, validated;
- ``manifests.py``: the objects a run creates (TrainJob, or Job, Service and ConfigMap);
- ``names.py``: object names and labels made from run ids;
- ``cluster.py``: the API server, through lightkube;
- ``status.py``: what the objects say (why a run waits, how it ended, which pod is which);
- ``stream.py``: a pod's log, split into the run folder's logs, events and rank records;
- ``dry_run.py``: what ``--dry-run`` prints, both ways when the API is not known.
"""

from .target import KubernetesTarget

__all__ = ["KubernetesTarget"]
