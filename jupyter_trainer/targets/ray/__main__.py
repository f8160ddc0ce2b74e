"""``python -m jupyter_trainer.targets.ray ADDRESS``: check a Ray cluster (see ``target``)."""

import sys

from .target import main

sys.exit(main(sys.argv[1:]))
