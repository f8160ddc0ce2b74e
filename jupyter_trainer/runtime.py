"""``from jupyter_trainer import runtime as jt``: the rank side's runtime by its public name."""

import sys

from .rankside.rank import runtime as _runtime

sys.modules[__name__] = _runtime
