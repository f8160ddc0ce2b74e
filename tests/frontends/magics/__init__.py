"""``%%train`` and ``%train`` in real kernels and headless notebooks."""
