"""How a run ends and what it leaves: the verdict and its evidence, lifecycle, faults, out of
memory, restarts, leftovers, the detached processes' logs."""
