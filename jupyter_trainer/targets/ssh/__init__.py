"""The ssh target: nodes reached with the system OpenSSH client, one launcher per node.

To write a target of another kind, start by copying this folder:

- ``target.py``: ``SshTarget``, the target itself and the order of its hooks: what it
  checks at submit time, the plan (``ssh -G`` and the node pre-flight), the environment
  built on every node, staging and the start of each node's launcher;
- ``running.py``: ``SshRunning``, the hooks once the launchers run: following the nodes,
  ranks' live stacks, and ending the run on every node (stop, leftovers, outputs);
- ``parallel.py``: one call per node on every node at once, failures named together;
- ``commands.py``: its configuration and every command it sends, as pure functions
  (golden-tested), the dry run's text included;
- ``prepare.py``: what it asks of nodes beyond the node layer's pre-flight (addresses,
  the options of a hop between nodes).
"""

from .target import SshTarget

__all__ = ["SshTarget"]
