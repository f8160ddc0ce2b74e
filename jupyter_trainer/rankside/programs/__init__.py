"""Programs sent on their own to other places, each one file run by another interpreter:

- ``kube_pod.py``: what every pod of a Kubernetes run starts (in the run's ConfigMap);
- ``ray_actor.py``: the shell that runs as a Ray actor on the nodes of a Ray cluster;
- ``collective_check.py``: the program of ``jupyter-trainer check``, sent as a run's script;
- ``data_unpack.py``: a data input's new copy on a node, sent with ``python -c``;
- ``env_build.py``: a locked environment built on a node, sent as ``build.py``.

This file stays on this machine: it only says what the folder holds.
"""
