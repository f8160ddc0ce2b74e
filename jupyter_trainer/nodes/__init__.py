"""The node layer: what every target that runs on other machines shares.

- ``rankside/agent/`` (layer 0): the program that runs on a node (standard library only);
  ``agent_zip.py``: that package as the one zip application a node is sent.
- ``commands.py``: its command lines; ``calls.py``: one call of it (pre-flight, stage,
  environment) through a transport.
- ``frames.py``: the frames it answers with; ``mirror.py``: live copies of a node's files.
- ``transport.py``: ``NodeShell``, what a way to reach a node must offer, and ``LocalShell``
  (this machine); ``ssh.py``: the system OpenSSH client, one such transport.
- ``prepare.py``: what a node must have and what it is sent.
- ``folder.py``: ``RemoteFolder``, a run's folder on one node and its whole lifecycle
  (pre-flight to discard), and ``Node``, a resolved node of a run.

Targets import from here; nothing here imports a target.
"""
