"""Hyperparameter sweeps: a search space over a cell's params (``space``), sampled and pruned
by Optuna (``policies``); a detached driver (``driver``, following its trials with ``trials``)
runs each trial as an ordinary run of the sweep's template, and ``handle.Sweep`` reads it
back."""
