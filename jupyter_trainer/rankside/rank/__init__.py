"""A rank's boot and runtime: what every rank of a run executes, copied into its snapshot.

- ``boot.py``: the file every launcher starts, ``code/_jt/boot.py`` in the snapshot;
- ``runtime.py``: ``jupyter_trainer.runtime`` (``jt``), what the training code sees;
- ``launcher_env.py``: which rank a process is, from whichever launcher started it;
- ``cell_run.py``: a notebook cell's script run under the cells it came from;
- ``run_inputs.py``, ``run_secrets.py``, ``script_args.py``, ``data.py``: what the run was
  given (``spec.json``, its secrets, the script's arguments, the data inputs);
- ``workdir.py``: the node's private working directory;
- ``event_lines.py``, ``rank_files.py``, ``rank_outputs.py``, ``stderr_tail.py``: what a
  rank writes (event lines, log marks, heartbeat, checkpoints, the end of its stderr).
"""
