"""Layer 6: the supervisor, one detached process per run, the only writer of its state.

``run.py`` drives the run from ``created`` to a terminal state (started as ``python -m
jupyter_trainer.supervisor``, ``__main__.py``); ``verdict.py`` decides how it ended and who
failed first, with ``attribution.py`` reading the ranks' evidence; ``watch.py`` watches
attempts, NaN/inf and stalls, and ``observe.py`` records what it finds in the state;
``launcher_exit.py``, ``snapshot_check.py`` and ``state_writer.py`` are its parts;
``starter.py`` starts a supervisor for ``submit`` (and keeps one warm)."""
