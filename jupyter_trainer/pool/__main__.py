"""``python -m jupyter_trainer.pool --socket PATH ...``: run a pool (see ``server``)."""

import sys

from .warm import main

sys.exit(main(sys.argv[1:]))
