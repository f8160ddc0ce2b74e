"""Hot start's client side: a run's ranks forked by a warm pool instead of started by
torchrun. ``local.py`` starts a local run's ranks in its pool; ``remote.py`` does it on nodes
reached through the node agent; ``bundle.py`` is the pool's files for such a node. The pool
itself, what runs on the node, is ``rankside/hotstart``."""
