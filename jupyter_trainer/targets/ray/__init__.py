"""The ray target: a Ray cluster's nodes, reserved as a placement group (``target.py``),
reached through a node shell that runs as a Ray actor (``shell.py`` here, and
``rankside/ray_actor.py`` on the nodes)."""

from .target import RayTarget

__all__ = ["RayTarget"]
