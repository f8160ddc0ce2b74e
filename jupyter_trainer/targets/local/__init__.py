"""The local target: every rank on this machine, under the chosen launcher (``target.py``).

This is the smallest target: copy this folder to start a new kind (see
docs/architecture.md, "Adding a target")."""

from .target import LocalTarget

__all__ = ["LocalTarget"]
