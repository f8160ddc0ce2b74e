"""The kubernetes target: Kubeflow Trainer TrainJobs, or Indexed Jobs with a headless Service."""

from .target import KubernetesTarget

__all__ = ["KubernetesTarget"]
