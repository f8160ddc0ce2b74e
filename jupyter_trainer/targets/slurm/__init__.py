"""The Slurm target: one batch job per run.

``target.py`` submits and follows the job; ``script.py`` writes its configuration, the
``sbatch`` command and the batch script (golden-tested); ``stage.py`` keeps a run's folder
on the cluster; ``hold.py`` keeps an allocation between hot runs."""

from .target import SlurmTarget

__all__ = ["SlurmTarget"]
