"""A warm rank pool for the local target (``--hot``).

A pool is a detached process, one per interpreter, environment and module set, that has
imported torch and the modules a run's entry imports, but has never initialised CUDA. It
serves fork requests on a private unix socket in the run store (``<home>/pools/``): each
rank it forks gets the environment, working directory, output and boot that torchrun gives a
worker, so a rank starts in milliseconds instead of paying interpreter start and
``import torch`` again. torchrun stays the reference: a pool that cannot be used (it could
not start, or importing the run's modules initialised CUDA) makes the run fall back to it.

Modules: ``server`` (the pool process), ``child`` (what a forked rank does before boot.py),
``client`` (connect or start a pool, send a run, follow its ranks), ``left_behind`` (what
the ranks leave behind when they end, which the pool ends with their run), ``records``
(what the pool writes down, so every leftover check sees forked ranks whose
``/proc/PID/environ`` still shows the pool's environment).
"""

from __future__ import annotations

from .records import leftover_pids, stop_pools

__all__ = ["leftover_pids", "stop_pools"]
