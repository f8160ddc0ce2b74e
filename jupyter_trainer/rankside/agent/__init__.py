"""The agent that runs on each node: ``python jt-node-<hash>.pyz --workdir W SUB ARGS``.

Standard library only (Python 3.8+), sent as one zip application whose package is
``_jt_agent`` (``nodes/agent_zip.py``), installed once under ``W/bin/``, run with the node's
python. ARGS is one JSON argv element, payloads come on stdin, answers are frames on stdout
(``\\x1eJT {json}`` then ``n`` raw bytes; the marker skips what a login shell's rc prints).
SUB (``main.py``): ``preflight`` (interpreter, imports, GPUs, tools, a port, an intact
snapshot; with ``session`` it then serves ``stage``, ``start``, ``follow``), ``stage``,
``environment``, ``start`` (the launcher under a keeper), ``follow`` (logs, events, rank
records; ``finish``, ``discard``), ``finish``, ``stop``, ``leftovers`` (process group,
JT_RUN_ID, pool record).

- ``frames.py``: the frames every answer is made of;
- ``processes.py``: the run's processes on this node, found and signalled;
- ``preflight.py``: the facts a run needs from this node; ``session.py``: the pre-flight's
  connection kept for the run's next steps;
- ``snapshot.py``: a snapshot (or an environment's lock) unpacked once, and its hash;
- ``environment.py``: a locked environment built here and checked with its own python;
- ``start.py``: the run folder prepared and the launcher started under a keeper;
- ``follow.py``: the run's files streamed back, and the run's end (``finish``);
- ``ending.py``: ``stop`` and ``discard``;
- ``main.py``: the command table.

Every call starts an agent: what a command alone needs is imported inside it.
"""
