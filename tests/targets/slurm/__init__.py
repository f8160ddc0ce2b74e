"""The Slurm target against a real single-host Slurm: scripts, accounting, hot runs, run
folders on the cluster."""
