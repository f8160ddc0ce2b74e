"""A fake Kubernetes API server at the process boundary, whose pods run as local processes."""

from .cluster import FakeCluster

__all__ = ["FakeCluster"]
