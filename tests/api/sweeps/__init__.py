"""Sweeps: spaces and files, samplers and pruners, drivers on every target, and their end."""
