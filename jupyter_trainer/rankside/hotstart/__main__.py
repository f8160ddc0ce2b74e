"""``python -m jupyter_trainer.rankside.hotstart --socket PATH ...``: run a pool (see ``server``)."""

import sys

from .warm import main

sys.exit(main(sys.argv[1:]))
