"""Where runs execute. Targets register by kind through the ``jupyter_trainer.targets``
entry-point group, first-party ones included, so a third party adds one the same way."""

from .base import BuiltEnvironment, Handle, Target
from .registry import configured_targets, get_target, target_kinds

__all__ = [
    "BuiltEnvironment",
    "Handle",
    "Target",
    "configured_targets",
    "get_target",
    "target_kinds",
]
