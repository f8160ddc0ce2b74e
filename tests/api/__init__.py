"""The Python API: its names, submit, diff, rerun, a run's files, cost, check, input errors;
``sweeps/`` for sweeps."""
