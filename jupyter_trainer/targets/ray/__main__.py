"""``python -m jupyter_trainer.targets.ray ADDRESS``: check a Ray cluster (see ``cluster``)."""

import sys

from .cluster import main

sys.exit(main(sys.argv[1:]))
