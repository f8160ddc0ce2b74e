"""The ray target: a Ray cluster's nodes, reserved as a placement group, running the ranks
the way the ssh target runs them on its hosts.

- ``target.py``: ``RayTarget``, the placement group, the node shells bound to its bundles,
  and the end of the run (actors, placement group, the leftover scan);
- ``placement.py``: where the placement group stands, and what the cluster lacks for it;
- ``config.py``: a ``kind = "ray"`` entry of targets.toml, validated;
- ``cluster.py``: the cluster's facts, asked before a run is created from a short-lived
  child driver (``__main__.py``, ``python -m jupyter_trainer.targets.ray ADDRESS``);
- ``shell.py``: a node reached through a node-shell actor (``rankside/programs/ray_actor.py`` on
  the nodes) behind the node layer's ``NodeShell``.
"""

from .target import RayTarget

__all__ = ["RayTarget"]
