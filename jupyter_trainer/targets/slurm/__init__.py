"""The Slurm target: one batch job per run.

- ``target.py``: ``SlurmTarget``, which submits and follows the job;
- ``queue.py``: Slurm's commands, run here or on the login node, and what they say of a job
  (its line in the queue, its final state and exit code);
- ``script.py``: its configuration, the ``sbatch`` command and the batch script
  (golden-tested);
- ``stage.py``: a run's folder on the cluster, kept in step with the local one;
- ``hold.py``: an allocation kept between hot runs.
"""

from .target import SlurmTarget

__all__ = ["SlurmTarget"]
