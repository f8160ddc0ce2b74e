"""Where a run executes, one folder per target (``ssh/``, ``slurm/``, ``ray/``,
``kubernetes/``); dry runs across targets here."""
