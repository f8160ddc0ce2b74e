"""What every program of the rank side uses of its host, the node agent and the hot-start
pool included: replacing a file whole (``atomic.py``), process facts from /proc and tree
teardown (``procs.py``), and where the run store lives (``home.py``).
"""
