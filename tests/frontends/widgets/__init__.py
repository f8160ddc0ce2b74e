"""The run monitor and sweep monitor widgets in real kernels, without a browser."""
